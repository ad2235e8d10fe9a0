//! The heal ledger (`RUN_DIR/heals.jsonl`): every reversible fault a run applies that
//! could outlive haq (a frozen process, a user command with a heal) is written here
//! *before* it is applied, and its heal after. A run that is SIGKILLed in between
//! leaves the entry open; `haq heal RUN_DIR` — and the next `haq run` in the same
//! reports directory or against the same target ([`super::open_runs`]) — undoes it
//! from the ledger: SIGCONT to the pid only while it is
//! the same process (its start time), the heal command with the fault's environment,
//! and for a kubernetes target the node uncordoned, the NetworkPolicy deleted, the
//! workload scaled back, an exec fault's heal exec'd in its pod (in the context the
//! run acted in).
//!
//! Each line is written with one `write` to a file opened for appending, so a killed
//! run leaves whole lines (the kernel keeps what was written; no flush is needed).

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::target::kube::heal::{ExecAt, Leftover, heal_blocking};
use crate::target::procs::{gone, proc_stat, stopped};
use crate::trace::files::HEALS_FILE;

/// How an open fault is undone without the run that applied it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "undo", rename_all = "snake_case")]
pub enum Remedy {
    /// SIGCONT to `pid`, if it is still the process that was stopped (`start`: its
    /// start time in clock ticks since boot, from `/proc/<pid>/stat`).
    Resume { pid: u32, start: Option<u64> },
    /// The fault's heal command, with the environment it would have had.
    Command {
        heal: String,
        env: Vec<(String, String)>,
        timeout_ms: u64,
    },
    /// Uncordon a node a kubernetes fault cordoned (in kubeconfig context `context`).
    KubeUncordon { context: String, node: String },
    /// Delete the NetworkPolicy a kubernetes network fault created and take its label
    /// off the pod.
    KubeIsolation {
        context: String,
        namespace: String,
        policy: String,
        pod: String,
        label: String,
    },
    /// Scale a workload a `replacement: scale` fault scaled down back to `replicas`
    /// (`plural`: `deployments` or `statefulsets`).
    KubeScale {
        context: String,
        namespace: String,
        plural: String,
        name: String,
        replicas: i32,
    },
    /// Exec a kubernetes exec fault's `heal` in `container` of `pod`, while it is the
    /// pod the fault hit (`uid`).
    KubeExec {
        context: String,
        namespace: String,
        pod: String,
        uid: String,
        container: String,
        heal: Vec<String>,
        timeout_ms: u64,
    },
}

/// One line of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
enum Line {
    /// The run that writes the ledger: its pid and start time (a live run's faults are
    /// its own to heal).
    Run { pid: u32, start: Option<u64> },
    /// About to apply a fault that `remedy` undoes.
    Open {
        id: u64,
        fault: String,
        replica: String,
        #[serde(flatten)]
        remedy: Remedy,
    },
    /// Entry `id` was healed (by the run, or by `haq heal`).
    Healed { id: u64, detail: String },
}

/// The run directories whose ledgers this process opened (what a second signal
/// leaves open is read back from them, [`left_open_here`]).
static OPENED: Mutex<Vec<std::path::PathBuf>> = Mutex::new(Vec::new());

/// The ledger a run writes; `none()` writes nothing (tests, benches).
pub struct Ledger {
    file: Mutex<Option<std::fs::File>>,
    next: AtomicU64,
    /// The run directory and the target's identity it is listed under in the
    /// per-user list of runs with open faults ([`super::open_runs`]), once it opens one.
    list: Option<(std::path::PathBuf, String)>,
    listed: std::sync::atomic::AtomicBool,
}

impl Ledger {
    /// Opens (appends to) `dir/heals.jsonl` and records this process as its run.
    pub fn open(dir: &Path) -> std::io::Result<Ledger> {
        Ledger::open_listed(dir, None)
    }

    /// As [`Ledger::open`]; with `target` (the target's identity), the run is listed
    /// in the per-user list of runs with open faults from its first entry on, so that
    /// the next run against the same target heals what it leaves.
    pub fn open_listed(dir: &Path, target: Option<&str>) -> std::io::Result<Ledger> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(HEALS_FILE))?;
        let l = Ledger {
            file: Mutex::new(Some(file)),
            next: AtomicU64::new(1),
            list: target.map(|t| (dir.to_path_buf(), t.to_string())),
            listed: false.into(),
        };
        OPENED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(dir.to_path_buf());
        let me = std::process::id();
        l.write(&Line::Run {
            pid: me,
            start: proc_stat(me).map(|s| s.1),
        });
        Ok(l)
    }

    pub fn none() -> Ledger {
        Ledger {
            file: Mutex::new(None),
            next: AtomicU64::new(1),
            list: None,
            listed: false.into(),
        }
    }

    fn write(&self, line: &Line) {
        let mut g = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some(f), Ok(mut text)) = (g.as_mut(), serde_json::to_string(line)) {
            text.push('\n');
            // One write: a whole line or nothing survives a kill.
            let _ = f.write_all(text.as_bytes());
        }
    }

    /// Records, before it is applied, a fault that `remedy` undoes; returns the entry.
    pub fn intend(&self, fault: &str, replica: &str, remedy: Remedy) -> u64 {
        if let Some((dir, target)) = &self.list
            && !self.listed.swap(true, Ordering::SeqCst)
            && let Err(e) = super::open_runs::note(dir, target)
        {
            eprintln!(
                "haq: warning: {} not listed among the runs with open faults ({e}): if haq is killed, `haq heal {0}` heals it",
                dir.display()
            );
        }
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.write(&Line::Open {
            id,
            fault: fault.into(),
            replica: replica.into(),
            remedy,
        });
        id
    }

    /// The run ended: it is unlisted when nothing is left open (else the next run
    /// against its target, or `haq heal`, heals it and unlists it).
    pub fn settle(&self) {
        if let Some((dir, _)) = &self.list
            && self.listed.load(Ordering::SeqCst)
            && open_entries(dir).is_ok_and(|(open, _)| open.is_empty())
        {
            super::open_runs::forget(dir);
        }
    }

    /// Records that entry `id` was healed.
    pub fn healed(&self, id: u64, detail: &str) {
        self.write(&Line::Healed {
            id,
            detail: detail.into(),
        });
    }
}

/// A fault left applied, as the ledger has it.
#[derive(Debug, Clone, PartialEq)]
pub struct Open {
    pub id: u64,
    pub fault: String,
    pub replica: String,
    pub remedy: Remedy,
}

/// What the ledger of `dir` leaves open, and whether the run that wrote it is still
/// alive (then they are its own to heal). No ledger: nothing open.
pub fn open_entries(dir: &Path) -> std::io::Result<(Vec<Open>, bool)> {
    let text = match std::fs::read_to_string(dir.join(HEALS_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), false)),
        Err(e) => return Err(e),
    };
    let mut open: Vec<Open> = Vec::new();
    let mut alive = false;
    // A torn last line (the run was killed mid-write) is skipped.
    for line in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Line>(l).ok())
    {
        match line {
            Line::Run { pid, start } => {
                alive = proc_stat(pid).is_some_and(|(state, s)| {
                    !matches!(state, 'Z' | 'X' | 'x') && start.is_none_or(|w| w == s)
                });
            }
            Line::Open {
                id,
                fault,
                replica,
                remedy,
            } => open.push(Open {
                id,
                fault,
                replica,
                remedy,
            }),
            Line::Healed { id, .. } => open.retain(|o| o.id != id),
        }
    }
    Ok((open, alive))
}

/// What the ledgers this process opened leave open, by run directory (after a second
/// signal abandoned the heals: what `haq heal RUN_DIR` is left to do).
pub fn left_open_here() -> Vec<(std::path::PathBuf, Vec<Open>)> {
    let dirs = OPENED.lock().unwrap_or_else(|e| e.into_inner()).clone();
    dirs.into_iter()
        .filter_map(|d| {
            let open = open_entries(&d).ok()?.0;
            (!open.is_empty()).then_some((d, open))
        })
        .collect()
}

impl Remedy {
    /// How it undoes its fault, in a few words (no command text: it may hold secrets).
    pub fn what(&self) -> String {
        match self {
            Remedy::Resume { pid, .. } => format!("SIGCONT to pid {pid}"),
            Remedy::Command { .. } => "its heal command".into(),
            Remedy::KubeUncordon { node, .. } => format!("uncordon node {node}"),
            Remedy::KubeIsolation { policy, .. } => format!("delete NetworkPolicy {policy}"),
            Remedy::KubeScale { name, replicas, .. } => {
                format!("scale {name} back to {replicas}")
            }
            Remedy::KubeExec { pod, .. } => format!("its heal exec'd in pod {pod}"),
        }
    }
}

/// How one open entry was healed.
#[derive(Debug, Clone)]
pub struct Done {
    pub entry: Open,
    pub ok: bool,
    pub detail: String,
}

/// Heals what the ledger of `dir` leaves open, recording each heal in it. A ledger
/// whose run is still alive is left alone (`Err`).
pub fn heal_dir(dir: &Path) -> Result<Vec<Done>, String> {
    let (open, alive) = open_entries(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if alive && !open.is_empty() {
        return Err(format!(
            "{}: the run that applied these faults is still running: it heals them itself",
            dir.display()
        ));
    }
    let mut ledger = None;
    let mut out = Vec::new();
    for o in open {
        let (ok, detail) = remedy(&o.remedy);
        if ok {
            let l = match ledger.take() {
                Some(l) => l,
                None => std::fs::OpenOptions::new()
                    .append(true)
                    .open(dir.join(HEALS_FILE))
                    .map_err(|e| format!("{}: {e}", dir.display()))?,
            };
            let mut l = l;
            if let Ok(mut text) = serde_json::to_string(&Line::Healed {
                id: o.id,
                detail: format!("haq heal: {detail}"),
            }) {
                text.push('\n');
                let _ = l.write_all(text.as_bytes());
            }
            ledger = Some(l);
        }
        out.push(Done {
            entry: o,
            ok,
            detail,
        });
    }
    if !alive && out.iter().all(|d| d.ok) {
        super::open_runs::forget(dir);
    }
    Ok(out)
}

/// Applies one remedy; whether it left nothing applied, and how.
fn remedy(r: &Remedy) -> (bool, String) {
    match r {
        Remedy::Resume { pid, start } => resume(*pid, *start),
        Remedy::Command {
            heal,
            env,
            timeout_ms,
        } => {
            let ran = super::shell::run_sh(heal, env, Duration::from_millis(*timeout_ms), None);
            (ran.ok, ran.describe("heal"))
        }
        Remedy::KubeUncordon { context, node } => {
            let node = node.clone();
            heal_blocking(context, Leftover::Cordon { node })
        }
        Remedy::KubeIsolation {
            context,
            namespace,
            policy,
            pod,
            label,
        } => heal_blocking(
            context,
            Leftover::Isolation {
                namespace: namespace.clone(),
                policy: policy.clone(),
                pod: pod.clone(),
                label: label.clone(),
            },
        ),
        Remedy::KubeScale {
            context,
            namespace,
            plural,
            name,
            replicas,
        } => heal_blocking(
            context,
            Leftover::Scale {
                namespace: namespace.clone(),
                plural: plural.clone(),
                name: name.clone(),
                replicas: *replicas,
            },
        ),
        Remedy::KubeExec {
            context,
            namespace,
            pod,
            uid,
            container,
            heal,
            timeout_ms,
        } => heal_blocking(
            context,
            Leftover::Exec {
                at: ExecAt {
                    namespace: namespace.clone(),
                    pod: pod.clone(),
                    uid: uid.clone(),
                    container: container.clone(),
                },
                heal: heal.clone(),
                timeout: Duration::from_millis(*timeout_ms),
            },
        ),
    }
}

/// SIGCONT to `pid` while it is the stopped process (its start time), verified by the
/// kernel's state; never to a pid reused by another process. Whether nothing is left
/// frozen, and how.
pub fn resume(pid: u32, start: Option<u64>) -> (bool, String) {
    match proc_stat(pid) {
        None => {
            return (
                true,
                format!("pid {pid} no longer exists: nothing left frozen"),
            );
        }
        Some((_, s)) if start.is_some_and(|w| w != s) => {
            return (
                true,
                format!("pid {pid} was reused by another process: not signalled"),
            );
        }
        _ => {}
    }
    if let Err(e) = nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGCONT) {
        return (gone(pid), format!("SIGCONT failed: SIGCONT: {e}"));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(2);
    while stopped(pid) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    if stopped(pid) {
        (false, format!("SIGCONT sent; pid {pid} still stopped"))
    } else {
        (true, format!("SIGCONT sent; pid {pid} running again"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("haq-ledger-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    /// What a run leaves open is read back; what it healed is not; its own live run
    /// keeps `haq heal` away.
    #[test]
    fn open_entries_are_the_ones_not_healed() {
        let d = dir("open");
        let l = Ledger::open(&d).expect("open");
        let a = l.intend(
            "freeze-a",
            "a",
            Remedy::Resume {
                pid: 1,
                start: None,
            },
        );
        let b = l.intend(
            "cmd-b",
            "b",
            Remedy::Command {
                heal: "true".into(),
                env: vec![("HAQ_FAULT".into(), "cmd-b".into())],
                timeout_ms: 1000,
            },
        );
        l.healed(a, "SIGCONT sent");
        let (open, alive) = open_entries(&d).expect("read");
        assert!(alive, "this process wrote it");
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].id, open[0].fault.as_str()), (b, "cmd-b"));
        assert!(heal_dir(&d).is_err(), "a live run heals its own");
        // A torn last line (killed mid-write) is skipped.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(d.join(HEALS_FILE))
            .expect("append");
        let _ = f.write_all(b"{\"ev\":\"healed\",\"id\":");
        assert_eq!(open_entries(&d).expect("read").0.len(), 1);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// `haq heal` resumes a stopped process, runs a heal command, records both, and
    /// never signals a pid whose start time is not the stopped process's.
    #[test]
    fn heal_dir_resumes_runs_and_records() {
        let d = dir("heal");
        let mut victim = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep");
        let pid = victim.id();
        let start = proc_stat(pid).map(|s| s.1);
        nix::sys::signal::kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).expect("stop");
        while !stopped(pid) {
            std::thread::sleep(Duration::from_millis(2));
        }
        // A ledger written by a run that is gone (pid 0 never runs a process).
        let lines = [
            serde_json::json!({"ev": "run", "pid": 0}),
            serde_json::json!({"ev": "open", "id": 1, "fault": "freeze-v", "replica": "v", "undo": "resume", "pid": pid, "start": start}),
            serde_json::json!({"ev": "open", "id": 2, "fault": "freeze-w", "replica": "w", "undo": "resume", "pid": pid, "start": start.map(|s| s + 1)}),
            serde_json::json!({"ev": "open", "id": 3, "fault": "cmd", "replica": "v", "undo": "command", "heal": format!("touch {}/healed-$HAQ_FAULT", d.display()), "env": [["HAQ_FAULT", "cmd"]], "timeout_ms": 5000}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(d.join(HEALS_FILE), text).expect("write");
        let done = heal_dir(&d).expect("heal");
        assert_eq!(done.len(), 3, "{done:?}");
        assert!(done.iter().all(|x| x.ok), "{done:?}");
        assert!(!stopped(pid), "resumed");
        assert!(
            done[1].detail.contains("reused by another process"),
            "{done:?}"
        );
        assert!(d.join("healed-cmd").exists());
        assert!(
            open_entries(&d).expect("read").0.is_empty(),
            "all recorded healed"
        );
        let _ = victim.kill();
        let _ = victim.wait();
        let _ = std::fs::remove_dir_all(&d);
    }
}
