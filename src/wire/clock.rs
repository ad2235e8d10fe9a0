//! The host's monotonic clock, shared by every process of a run.

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process on this host, so the
/// sim's processes can stamp their journals on the run's timeline.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
