//! Every shipped scenario gives the result it states, on every seed (issue 20 item 9):
//! each runs over seeds 1–10 on the reference gateway and must end PASS with every
//! verdict of its `criteria.require` judged PASS. What is tested is that the result
//! does not depend on the seed — faults that must catch requests fire on a load level
//! (`in_flight`) or a probe, not at a second that may find nothing in flight — so the
//! runs are shortened: shorter phases, the protected load at about half the offered
//! rate (a short phase's Poisson draw varies more than a long one's), the error rate
//! allowed doubled (a short degraded interval has fewer requests among which to count
//! the streams a kill cuts), and latency, lateness and load bounds loosened for a debug
//! build on a busy 2-core machine as in `tests/it/m9.rs` (and the sim gateway's health
//! checks given a second, its publication leases five, timing bounds of two seconds
//! four: a worker starved of CPU must not read as a dead one).
//!
//! The files as shipped, unshortened, were run over seeds 1–10 with the release build
//! (`haq run scenarios/X.yaml --seed N --quiet --out DIR`, two runs at a time on the
//! shared 2-core box, 2026-12-05): all nine PASS on every seed once `migrate.yaml`'s
//! protected load sat under its Poisson offer (it FAILed seeds 1, 2, 4: a phase drawn
//! short, Capacity UNKNOWN) and Capacity left the streams m9-2's second kill cut to
//! Request-Fate (seed 8: 5.1% "failed"). The plan-only test at the end keeps the first.

use futures_util::StreamExt;
use haq::check::{RunResult, Status};

use crate::support::{LOOSE_SLO, plan, run};

/// Runs at a time in one test (tests themselves run two at a time): the light runs
/// (M9, replay) five, the heavier ones three.
const LIGHT: usize = 5;
const HEAVY: usize = 3;

/// What the shortened runs of every scenario share.
const SHORT: [&str; 8] = [
    LOOSE_SLO[0],
    LOOSE_SLO[1],
    LOOSE_SLO[2],
    "slo.error_rate_max=20%",
    "client.max_late=3s",
    "client.max_load_error=30%",
    "target.gateway.health_timeout=1s",
    "target.gateway.lease_ttl=5s",
];

/// Runs `scenario` over seeds 1–10 with `sets` and checks each run's result and
/// required verdicts, naming every seed that gave something else.
async fn over_ten_seeds(scenario: &str, sets: &[&str], at_once: usize) {
    let file = format!("scenarios/{scenario}.yaml");
    let runs = futures_util::stream::iter(1..=10u64)
        .map(|seed| {
            let seed_set = format!("workload.seed={seed}");
            let mut all: Vec<&str> = SHORT.to_vec();
            all.extend(sets);
            all.push(&seed_set);
            let p = plan(&file, &all);
            let name = format!("shipped-{scenario}-{seed}");
            async move { (seed, run(p, &name).await) }
        })
        .buffer_unordered(at_once)
        .collect::<Vec<_>>()
        .await;
    let mut wrong = Vec::new();
    for (seed, r) in &runs {
        let j = &r.judgement;
        let required = &r.plan.scenario.criteria.require;
        assert!(
            !required.is_empty(),
            "{scenario} states no required verdicts"
        );
        let bad: Vec<String> = j
            .verdicts
            .iter()
            .filter(|v| required.contains(&v.name) && v.status != Status::Pass)
            .map(|v| format!("{} {}: {}", v.name, v.status.as_str(), v.summary))
            .collect();
        if j.result() != RunResult::Pass || !bad.is_empty() {
            wrong.push(format!(
                "seed {seed}: {} ({}) — {}",
                j.result(),
                r.run_dir.display(),
                bad.join(" | ")
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{scenario} did not give its stated result on every seed:\n{}",
        wrong.join("\n")
    );
}

/// The five M9 scenarios: 3 s / 4 s / 3 s phases, the probe 1 s into the fault phase.
const M9: [&str; 5] = [
    "phases[0].duration=3s",
    "phases[1].duration=4s",
    "phases[2].duration=3s",
    "protected_load=2/s",
    "workload.mix.classes[0].output_tokens={uniform: [30, 60]}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_passes_on_every_seed() {
    over_ten_seeds(
        "quickstart",
        &[
            "phases[0].duration=3s",
            "phases[1].duration=5s",
            "phases[2].duration=3s",
            "faults[0].at.offset=1s",
            "protected_load=3/s",
        ],
        HEAVY,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_passes_all_eight_on_every_seed() {
    over_ten_seeds(
        "full",
        &[
            "phases[0].duration=3s",
            "phases[1].duration=7s",
            "phases[2].duration=4s",
            "phases[3]={name: overload, rate: 12/s, duration: 3s}",
            // The drain 4 s into its phase: the overload's queue has drained first (a
            // drain 2 s after the overload caught queued requests a starved worker
            // rejected, on 3 seeds of 10 under the full suite).
            "phases[4].duration=8s",
            "phases[5].duration=3s",
            "faults[1].at.offset=4s",
            "protected_load=2.5/s",
            "faults[0].at.offset=1s",
            "faults[0].restart={after: 500ms, cold_start: 1s}",
            "faults[1].restart={after: 0s, cold_start: 1s}",
            // The drained w3's replacement serves within the drain phase's last 4 s and
            // the after-drain phase: 6.1 s once in CI at 6 s (debug build, 2 busy cores).
            "criteria.recovery.ready_and_serving_max=9s",
            "criteria.routing.traffic_removal_max=4s",
            "criteria.maintenance.removal_max=4s",
        ],
        // One run at a time: four workers and a gateway per run on two cores.
        1,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_1_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.push("faults[0].at.offset=1s");
    over_ten_seeds("m9-1-kill-in-prefill", &sets, LIGHT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_2_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.extend(["faults[0].at.offset=500ms", "faults[1].at.offset=2s"]);
    over_ten_seeds("m9-2-computed-not-sent", &sets, LIGHT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_3_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.push("faults[0].at.offset=1s");
    over_ten_seeds("m9-3-kill-after-first-delta", &sets, LIGHT).await;
}

/// A request the gateway sends to the replica just as the path is cut is read by haq's
/// proxy and recorded when it came (the gateway routed it then), and forwarded only at
/// the heal; stamped at the heal, it once made Routing count traffic to the cut replica
/// until the end of the load on every seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_4_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.push("faults[0].at.offset=1s");
    over_ten_seeds("m9-4-network-cut", &sets, LIGHT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn m9_5_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.push("faults[0].at.offset=1s");
    over_ten_seeds("m9-5-kill-after-tool-call", &sets, LIGHT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_passes_on_every_seed() {
    over_ten_seeds("replay", &["phases[0].duration=4s"], LIGHT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_passes_on_every_seed() {
    let mut sets = M9.to_vec();
    sets.push("faults[0].at.offset=1s");
    over_ten_seeds("migrate", &sets, LIGHT).await;
}

/// Every shipped scenario as shipped (no `--set`), on seeds 1–10: `haq validate` warns
/// about nothing (a plan that cannot pass is warned about) and the drawn schedule
/// offers the protected load in every phase of the degraded interval, within
/// `client.max_load_error` as the Capacity verdict counts it — Capacity is UNKNOWN otherwise, and every shipped file
/// requires it. `migrate.yaml` once offered 6/s Poisson at a protected 6/s: as shipped
/// it ended FAIL on seeds 1, 2 and 4 while the ten-seed runs above, which set their
/// own protected load for their shortened phases, passed. Plans only: nothing runs.
#[test]
fn every_shipped_scenario_as_shipped_offers_its_protected_load_on_every_seed() {
    let dir = crate::support::root().join("scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    let mut wrong = Vec::new();
    for f in &files {
        for seed in 1..=10u64 {
            let checked = match haq::plan::check(f, &[], Some(seed)) {
                Ok(c) => c,
                Err(e) => panic!("{}: {e:?}", f.display()),
            };
            for w in &checked.warnings {
                wrong.push(format!("{} seed {seed}: warning {w}", f.display()));
            }
            let plan = &checked.plan;
            let mut offered = vec![0u64; plan.phases.len()];
            for p in haq::workload::Schedule::new(plan).expect("schedule") {
                offered[p.phase] += 1;
            }
            let l = plan.scenario.protected_load.0;
            let tol = plan.scenario.client.max_load_error.0;
            let window = haq::plan::warnings::capacity_window(plan);
            for (p, n) in plan.phases.iter().zip(&offered) {
                if !window.contains(&p.name) {
                    continue;
                }
                let due = l * p.duration.as_secs_f64();
                if (*n as f64) + (tol * due).max(1.0) < due {
                    wrong.push(format!(
                        "{} seed {seed}: phase {} offers {n} requests, the protected load {due:.0}",
                        f.display(),
                        p.name
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
