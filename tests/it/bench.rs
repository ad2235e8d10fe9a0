//! `haq bench client` works end to end (figures are in docs/performance.md; no timing
//! is asserted here): every stamped event is read and analysed.

use crate::support::{haq_bin, scratch};

#[test]
fn bench_client_reads_every_stamped_event() {
    let dir = scratch("bench");
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
            "--out",
        ])
        .arg(&dir)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).expect("json report");
    let requests = r["requests"].as_u64().expect("requests");
    assert!(requests >= 50, "{r}");
    assert_eq!(r["completed"], requests);
    assert_eq!(r["deltas"].as_u64(), Some(requests * 10), "{r}");
    // role, 10 deltas, finish+usage+[DONE] in one write: 14 events per stream
    assert_eq!(r["events"].as_u64(), Some(requests * 14), "{r}");
    assert!(r["lag_p50_ms"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    // Four streams in steady state: a handful of connections, reused afterwards.
    let new = r["new_connections"].as_u64().expect("new_connections");
    assert!((1..requests).contains(&new), "{r}");
    assert!(
        r["ttft_error_reused_p50_ms"]
            .as_f64()
            .is_some_and(|v| v > 0.0),
        "{r}"
    );
    assert!(r["cpu_load_s"].as_f64().is_some_and(|v| v > 0.0), "{r}");
    assert!(r["peak_rss_mib"].as_f64().is_some_and(|v| v > 1.0), "{r}");
}
