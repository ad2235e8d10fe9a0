//! `haq bench client` works end to end (figures are in docs/performance.md; no timing
//! is asserted here): every stamped event is read and analysed.

use crate::support::{haq_bin, scratch};

/// `haq bench client` of 4 short streams for 2 s, with `extra` flags, kept in `dir`:
/// its JSON report.
fn bench_json(dir: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(haq_bin())
        .args([
            "bench",
            "client",
            "--streams",
            "4",
            "--tokens",
            "10",
            "--itl",
            "5ms",
            "--ttft",
            "5ms",
            "--duration",
            "2s",
            "--json",
        ])
        .args(extra)
        .arg("--out")
        .arg(dir)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("json report")
}

#[test]
fn bench_client_reads_every_stamped_event() {
    let dir = scratch("bench");
    let r = bench_json(&dir, &[]);
    let requests = r["requests"].as_u64().expect("requests");
    assert!(requests >= 50, "{r}");
    assert_eq!(r["completed"], requests);
    assert_eq!(r["deltas"].as_u64(), Some(requests * 10), "{r}");
    // role, 10 deltas, finish+usage+[DONE] in one write: 14 events per stream
    assert_eq!(r["events"].as_u64(), Some(requests * 14), "{r}");
    assert!(r["lag_p50_ms"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    // Four streams in steady state: four connections opened before load, reused.
    assert_eq!(r["warmed_connections"].as_u64(), Some(4), "{r}");
    let new = r["new_connections"].as_u64().expect("new_connections");
    assert!(new < requests / 2, "{r}");
    assert!(
        r["ttft_error_reused_p50_ms"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{r}"
    );
    // The trace says which connections were warmed, and requests ran on them.
    let run = std::fs::read_dir(&dir)
        .expect("out dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("run-"))
        })
        .expect("run dir");
    let events: Vec<haq::trace::Event> = haq::trace::read(&run.join("trace.jsonl"))
        .expect("trace")
        .collect::<Result<_, _>>()
        .expect("events");
    let warmed: Vec<&String> = events
        .iter()
        .find_map(|e| match e {
            haq::trace::Event::Warmed {
                conns, failed: 0, ..
            } => Some(conns.iter().collect()),
            _ => None,
        })
        .expect("a warmed event");
    let distinct: std::collections::HashSet<_> = warmed.iter().collect();
    assert_eq!(distinct.len(), 4, "{warmed:?}");
    let on_warm = events
        .iter()
        .filter(|e| matches!(e, haq::trace::Event::Response { conn: Some(c), .. } if warmed.contains(&c)))
        .count();
    assert!(on_warm >= 4, "requests on warmed connections: {on_warm}");
    assert!(r["cpu_load_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    assert!(r["peak_rss_mib"].as_f64().is_some_and(|v| v > 1.0), "{r}");
}

/// `haq bench client --agents 2` (issue 17 item 4), short and bounded: the load is sent
/// by two agent processes, every stamped event is still read, and the report counts
/// the agents' CPU (part of the load's).
#[test]
fn bench_client_with_two_agents_reports_their_cpu() {
    let r = bench_json(&scratch("bench-agents"), &["--agents", "2"]);
    assert_eq!(r["agents"], 2, "{r}");
    let requests = r["requests"].as_u64().expect("requests");
    assert!(requests >= 50, "{r}");
    assert_eq!(r["completed"], requests, "{r}");
    assert_eq!(r["events"].as_u64(), Some(requests * 14), "{r}");
    assert!(r["events_per_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    let (load, agents) = (
        r["cpu_load_s"].as_f64().expect("load"),
        r["cpu_agents_s"].as_f64().expect("agents' CPU"),
    );
    assert!(agents > 0.0 && agents <= load, "{r}");
    assert_eq!(r["valid"], true, "{r}");
}
