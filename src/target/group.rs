//! The process groups haq starts for the user's shell commands (a command fault's
//! inject, verify and heal, a heal from the ledger, a replica's restart command): each
//! `sh -c` leads a group of its own, so that everything it started without `setsid` —
//! a background child included — is signalled with it, and a Ctrl-C at haq's terminal
//! reaches none of them. A fault command's group is known here while it runs
//! ([`Group`]), killed at its timeout or an interrupt, and [`end_all`] ends what is
//! left when haq ends (SIGTERM, then SIGKILL after a grace); a restart command's is not
//! (the replacement outlives the run). After a second SIGINT/SIGTERM ([`abandon`]) no
//! command is started and running ones are killed.

use std::os::unix::process::CommandExt;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The groups haq started and may still have to end (their ids).
static LIVE: Mutex<Vec<i32>> = Mutex::new(Vec::new());
static ABANDONED: AtomicBool = AtomicBool::new(false);

fn live() -> std::sync::MutexGuard<'static, Vec<i32>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// `sh -c cmd` leading a process group of its own, stdin closed, with the scheduling
/// haq's children get ([`crate::priority::restore_in_child`]).
pub fn sh(cmd: &str) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(cmd).stdin(Stdio::null()).process_group(0);
    // SAFETY: restore_in_child is async-signal-safe.
    unsafe {
        c.pre_exec(crate::priority::restore_in_child);
    }
    c
}

/// A group started from [`sh`] (its leader's pid is its id), known until dropped.
pub struct Group {
    pgid: i32,
}

impl Group {
    /// Records the group `leader` leads.
    pub fn of(leader: u32) -> Group {
        let pgid = leader as i32;
        live().push(pgid);
        Group { pgid }
    }

    /// SIGKILL to every process of the group, now (a timeout, an interrupt).
    pub fn kill(&self) {
        // SAFETY: killpg on a group this process started and still knows.
        unsafe { libc::killpg(self.pgid, libc::SIGKILL) };
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        live().retain(|&g| g != self.pgid);
    }
}

/// The processes of group `pgid` that are alive (zombies waiting to be reaped left
/// out), from `/proc`.
pub fn members(pgid: i32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // After the command name (which may hold spaces): state, ppid, pgrp.
            let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or_default();
            let f: Vec<&str> = rest.split_whitespace().take(3).collect();
            f.len() == 3 && f[0] != "Z" && f[0] != "X" && f[2].parse() == Ok(pgid)
        })
        .collect()
}

/// SIGTERM to each group, then SIGKILL to what is left of them after `grace`.
fn end(pgids: &[i32], grace: Duration) {
    // Only groups that still have a live process: a group id is free to be reused
    // once its last process is gone.
    let signal = |sig: i32| {
        for &g in pgids {
            if !members(g).is_empty() {
                // SAFETY: killpg on a group this process started.
                unsafe { libc::killpg(g, sig) };
            }
        }
    };
    signal(libc::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && pgids.iter().any(|&g| !members(g).is_empty()) {
        std::thread::sleep(Duration::from_millis(20));
    }
    signal(libc::SIGKILL);
}

/// Whether haq knows group `pgid` (would end it when it ends).
#[cfg(test)]
pub fn known(pgid: i32) -> bool {
    live().contains(&pgid)
}

/// Ends every group haq still knows (haq is ending), blocking up to about `grace`.
pub fn end_all(grace: Duration) {
    let all: Vec<i32> = live().drain(..).collect();
    end(&all, grace);
}

/// haq must end at once (a second SIGINT/SIGTERM; the first, for `haq heal`): no
/// command starts from now on, and running ones are killed by the code waiting for
/// them (which sees [`abandoned`]).
pub fn abandon() {
    ABANDONED.store(true, Ordering::SeqCst);
}

/// Whether haq was told to end at once ([`abandon`]).
pub fn abandoned() -> bool {
    ABANDONED.load(Ordering::SeqCst)
}
