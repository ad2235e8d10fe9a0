//! The measuring client's CPU priority (SPEC Q12: numbers from a client that fell behind
//! its own schedule are not evidence). On a shared CI box, compilers and the target itself
//! compete with haq's dispatcher for the CPU; a late wake-up shows as schedule slip and
//! can make a run INVALID. When the process may (root or CAP_SYS_NICE), `haq run` and
//! `haq bench client` lower their nice value to [`CLIENT_NICE`] before any thread starts;
//! every child haq starts (sim processes, fault commands, restarts) gets the nice value
//! haq was started with, so only the instrument is favoured, never the system under test.
//! `HAQ_NICE=off` keeps the inherited priority; `HAQ_NICE=N` asks for nice N instead.
//!
//! Nice values rank threads within one scheduling group only. Where the kernel groups
//! CPU time by session (`/proc/sys/kernel/sched_autogroup_enabled`), the sim processes
//! run in sessions of their own (`sim::cluster`), so that the session holding haq stays
//! light and wakes up on time however busy the simulated cluster is.

use std::sync::atomic::{AtomicI32, Ordering};

/// The nice value the measuring client asks for.
pub const CLIENT_NICE: i32 = -10;

/// The nice value haq was started with; `i32::MIN` until [`raise_for_measurement`] ran.
static BASE: AtomicI32 = AtomicI32::new(i32::MIN);

fn nice_of_this_thread() -> Option<i32> {
    // getpriority may legitimately return -1: clear errno first and check it after.
    // SAFETY: errno is thread-local; getpriority reads only this thread's priority.
    unsafe {
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, 0);
        (*libc::__errno_location() == 0).then_some(n)
    }
}

/// Lowers this thread's nice value (threads started after inherit it). Call before the
/// runtime starts. Returns the nice value now in force when it changed, `None` when
/// unchanged (not permitted, already at least as favoured, or `HAQ_NICE=off`).
pub fn raise_for_measurement() -> Option<i32> {
    let want = match std::env::var("HAQ_NICE") {
        Ok(v) if v.trim().eq_ignore_ascii_case("off") => return None,
        Ok(v) => v.trim().parse().unwrap_or(CLIENT_NICE),
        Err(_) => CLIENT_NICE,
    };
    let base = nice_of_this_thread()?;
    if want >= base {
        return None;
    }
    // SAFETY: plain syscall on this thread; failure (EACCES/EPERM) leaves it unchanged.
    let ok = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, want) } == 0;
    if !ok {
        return None;
    }
    BASE.store(base, Ordering::Relaxed);
    Some(want)
}

/// In a child between fork and exec: back to the nice value haq was started with.
/// Async-signal-safe (an atomic load and one syscall).
pub fn restore_in_child() -> std::io::Result<()> {
    let base = BASE.load(Ordering::Relaxed);
    if base == i32::MIN {
        return Ok(());
    }
    // SAFETY: setpriority on the calling (child) process only; raising the nice value
    // needs no privilege.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, base) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn the_client_is_favoured_and_its_children_are_not() {
        // Its own thread: Linux nice values are per thread, the harness keeps its own.
        std::thread::spawn(|| {
            let base = nice_of_this_thread().expect("getpriority");
            let Some(now) = raise_for_measurement() else {
                // Not permitted here (no CAP_SYS_NICE) or HAQ_NICE=off: nothing changed.
                assert_eq!(nice_of_this_thread(), Some(base));
                return;
            };
            assert!(now < base);
            assert_eq!(nice_of_this_thread(), Some(now));
            let mut c = std::process::Command::new("sh");
            c.arg("-c").arg("cut -d' ' -f19 /proc/self/stat");
            // SAFETY: restore_in_child is async-signal-safe.
            unsafe {
                c.pre_exec(restore_in_child);
            }
            let out = c.output().expect("sh");
            let child: i32 = String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("nice field");
            assert_eq!(child, base, "a child gets the nice value haq started with");
        })
        .join()
        .expect("thread");
    }
}
