//! haq's own load at each phase edge (issue 19 item 4): the dispatcher thread's CPU
//! time, the run's runtime workers' busy time and the process's CPU time, written to
//! the trace (`own_load`) by the dispatcher as it crosses the edge. The checks read
//! the deltas of a capacity-search step (`check::own`): a step where haq's own
//! client, not the target, was busy to the limit is marked so.

use crate::trace::{Clock, Edge, Event, TraceWriter};

fn micros(ts: &libc::timespec) -> u64 {
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1000
}

/// CPU time of the calling thread (µs).
fn thread_cpu_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; the clock id is a constant.
    let ok = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0;
    if ok { micros(&ts) } else { 0 }
}

/// CPU time of the whole process, user and system (µs).
fn process_cpu_us() -> u64 {
    // SAFETY: getrusage fills one rusage struct we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) } != 0 {
        return 0;
    }
    let tv = |t: libc::timeval| (t.tv_sec as u64) * 1_000_000 + t.tv_usec as u64;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// Writes haq's own load at a phase edge; called on the dispatcher thread.
pub fn emit(tw: &TraceWriter, clock: &Clock, rt: &tokio::runtime::Handle, phase: &str, edge: Edge) {
    let m = rt.metrics();
    let workers = m.num_workers();
    let busy: u64 = (0..workers)
        .map(|w| m.worker_total_busy_duration(w).as_micros() as u64)
        .sum();
    tw.emit(Event::OwnLoad {
        t: clock.now_us(),
        phase: phase.to_string(),
        edge,
        dispatch_cpu_us: thread_cpu_us(),
        busy_us: busy,
        workers: workers as u32,
        process_cpu_us: process_cpu_us(),
    });
}
