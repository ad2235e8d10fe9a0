//! `haq check` judges a long run in bounded memory (issue 17 item 3): the child's own
//! peak RSS on a generated million-request run stays under the stated bound.

use std::path::Path;
use std::time::Duration;

use crate::support::{haq_bin, scratch};

/// The bound the issue states for judging a million requests.
const BOUND_KIB: u64 = 256 * 1024;

/// A key of /proc/PID/status in KiB (`VmHWM:`, `RssAnon:`); `None` once the process
/// is gone.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs `haq check dir`, its output into files beside `dir`: the exit code and the
/// peak of its own VmHWM (KiB), sampled every 20 ms while it runs. VmHWM is the
/// high-water mark of the process's own memory since its exec; wait4's ru_maxrss
/// would carry over the RSS of this (large) test process it was spawned from (see
/// hostile.rs).
fn check_peak(dir: &Path) -> (Option<i32>, u64) {
    let out = |name: &str| {
        let p = dir.with_extension(name);
        std::fs::File::create(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let mut child = std::process::Command::new(haq_bin())
        .arg("check")
        .arg(dir)
        .stdout(out("stdout"))
        .stderr(out("stderr"))
        .spawn()
        .expect("haq check runs");
    let pid = child.id();
    let mut peak = 0;
    loop {
        // Read before reaping: once waited for, the pid may be another process's.
        if let Some(k) = status_kib(pid, "VmHWM:") {
            peak = peak.max(k);
        }
        match child.try_wait().expect("wait") {
            Some(status) => return (status.code(), peak),
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Regression for "`haq check` on a generated 1M-request run stays under the stated
/// memory bound" (issue 17, docs/performance.md): writes a quickstart-shaped run of a
/// million requests (`haq::bench::runs`, ~2.3 GB, in target/it-scratch, removed
/// after) and judges it with the haq binary, its own peak RSS (VmHWM) under 256 MiB.
/// Before the bounded fold it was 968 MiB; measured 52 MiB (docs/performance.md).
/// Ignored for its time (~40 s in release, far longer in debug) and disk space:
///
/// ```sh
/// cargo test --release --locked --test it haq_check_of_a_million_requests_stays_under_256_mib -- --ignored --nocapture
/// ```
#[test]
#[ignore = "~40 s in release and 2.3 GB of disk: run by hand (see its doc)"]
fn haq_check_of_a_million_requests_stays_under_256_mib() {
    let dir = scratch("check-1m").join("run");
    let t = std::time::Instant::now();
    let w = haq::bench::runs::write(&dir, &haq::bench::runs::RunShape::new(1_000_000))
        .expect("writes the run");
    let written = t.elapsed();
    assert!(w.requests > 990_000, "{} requests written", w.requests);
    let t = std::time::Instant::now();
    let (code, peak) = check_peak(&dir);
    let judged = t.elapsed();
    let stdout = std::fs::read_to_string(dir.with_extension("stdout")).unwrap_or_default();
    let stderr = std::fs::read_to_string(dir.with_extension("stderr")).unwrap_or_default();
    println!(
        "haq check of {} requests ({} trace lines, {} gateway journal lines, written in {:.0} s): exit {code:?} in {:.0} s, peak RSS {} MiB (VmHWM)",
        w.requests,
        w.trace_lines,
        w.journal_lines,
        written.as_secs_f64(),
        judged.as_secs_f64(),
        peak / 1024
    );
    let _ = std::fs::remove_dir_all(&dir);
    // PASS or FAIL (w2 never comes back: Recovery FAILs), never unusable.
    assert!(matches!(code, Some(0 | 1)), "{stdout}\n{stderr}");
    assert!(peak > 0, "no VmHWM read while haq check ran");
    assert!(
        peak <= BOUND_KIB,
        "haq check peaked at {} MiB, over the 256 MiB bound",
        peak / 1024
    );
}
