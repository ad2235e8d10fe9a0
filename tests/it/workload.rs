//! The shipped request mixes and the replay scenario are valid and schedule
//! deterministically.

use crate::support::{plan, root};

#[test]
fn every_shipped_workload_is_valid_through_the_quickstart() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("workloads")).expect("workloads") {
        let p = e.expect("entry").path();
        if p.extension().and_then(|x| x.to_str()) != Some("yaml") {
            continue;
        }
        let name = p.file_name().and_then(|x| x.to_str()).expect("name");
        let set = format!("workload.mix=../workloads/{name}");
        let plan = plan("scenarios/quickstart.yaml", &[&set]);
        let a: Vec<_> = haq::workload::Schedule::new(&plan)
            .expect("schedule")
            .take(50)
            .collect();
        let b: Vec<_> = haq::workload::Schedule::new(&plan)
            .expect("schedule")
            .take(50)
            .collect();
        assert_eq!(a, b, "{name}");
        n += 1;
    }
    assert!(n >= 3);
}

#[test]
fn the_replay_scenario_reads_its_trace() {
    let p = plan("scenarios/replay.yaml", &[]);
    assert!(p.inputs.replay.is_some());
    assert!(
        (10.0..25.0).contains(&p.rate),
        "mean replayed rate {}",
        p.rate
    );
    let reqs: Vec<_> = haq::workload::Schedule::new(&p)
        .expect("schedule")
        .collect();
    assert!(reqs.len() > 100);
    assert!(reqs.iter().all(|r| r.hash_ids.is_some()));
}
