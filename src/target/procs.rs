//! The kernel's view of a replica's process: its state and start time from
//! `/proc/<pid>/stat`, and the pid a process reference names (never pid 0/1, never haq,
//! never a reused pid).

use super::registry::ProcRef;

/// The state letter and start time (field 22) of a process, from `/proc/<pid>/stat`.
pub fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last `)`.
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The process is gone (no such pid, or a zombie / dead entry awaiting its parent).
pub fn gone(pid: u32) -> bool {
    match proc_stat(pid) {
        None => true,
        Some((s, _)) => matches!(s, 'Z' | 'X' | 'x'),
    }
}

/// The process is stopped (SIGSTOP).
pub fn stopped(pid: u32) -> bool {
    matches!(proc_stat(pid), Some(('T' | 't', _)))
}

/// Resolves a process reference to a pid haq may signal (never pid 0/1, never haq
/// itself, never a pid reused by another process).
pub fn resolve(p: &ProcRef) -> Result<u32, String> {
    let pid = match p {
        ProcRef::Sim(_) => return Err("a sim process is signalled through its handle".into()),
        ProcRef::Pod(p) => {
            return Err(format!(
                "pod {} is reached through the Kubernetes API, not signalled",
                p.pod.name
            ));
        }
        ProcRef::Pid { pid, start } => {
            if let (Some(want), Some((_, now))) = (start, proc_stat(*pid))
                && *want != now
            {
                return Err(format!(
                    "pid {pid} now belongs to another process (start time {now}, declared one had {want}): refused"
                ));
            }
            *pid
        }
        ProcRef::PidFile(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading pid file {}: {e}", path.display()))?;
            text.trim().parse().map_err(|_| {
                format!(
                    "pid file {} holds {:?}, not a pid",
                    path.display(),
                    text.trim()
                )
            })?
        }
    };
    if pid <= 1 || pid == std::process::id() {
        return Err(format!("pid {pid} is not a process haq may signal"));
    }
    Ok(pid)
}
