//! Command backend: the user's shell commands inject, verify and heal a fault (cloud
//! APIs, DCGM, iptables, kubectl — anything), with haq's context in environment
//! variables. Each command runs with `sh -c`, in its own process group, bounded by a
//! timeout (the group is killed when it expires).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::backend::{Context, Injected, Injector};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;

/// How a command ended.
#[derive(Debug, Clone)]
pub struct Ran {
    pub ok: bool,
    /// `exit 0`, `exit 3`, `timed out after 2s`, …
    pub status: String,
    /// stdout then stderr, trimmed and bounded.
    pub output: String,
}

impl Ran {
    pub fn describe(&self, what: &str) -> String {
        if self.output.is_empty() {
            format!("{what} {}", self.status)
        } else {
            format!("{what} {}: {}", self.status, self.output)
        }
    }
}

fn tail(s: &[u8]) -> String {
    let t = String::from_utf8_lossy(s);
    let t = t.trim();
    let n = t.chars().count();
    if n > 400 {
        format!("…{}", t.chars().skip(n - 400).collect::<String>())
    } else {
        t.to_string()
    }
}

/// Most output kept of a command, each stream (its tail is what `Ran` shows).
const KEEP_OUTPUT: usize = 64 * 1024;
/// How long the output is waited for once the command ended: a descendant that left
/// the process group (`setsid … &`) may hold the pipes open for as long as it lives.
const PIPE_GRACE: Duration = Duration::from_millis(200);

/// A pipe read on its own thread into a bounded buffer that can be taken at any time.
struct Drain {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Drain {
    fn new(pipe: Option<impl Read + Send + 'static>) -> Drain {
        let buf = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, done) = std::sync::mpsc::channel();
        let b = buf.clone();
        std::thread::spawn(move || {
            if let Some(mut p) = pipe {
                let mut chunk = [0u8; 8192];
                while let Ok(n) = p.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    let mut g = b.lock().unwrap_or_else(|e| e.into_inner());
                    g.extend_from_slice(&chunk[..n]);
                    if g.len() > KEEP_OUTPUT {
                        let cut = g.len() - KEEP_OUTPUT;
                        g.drain(..cut);
                    }
                }
            }
            let _ = tx.send(());
        });
        Drain { buf, done }
    }

    /// What was read, once the pipe closed or `grace` passed (then the reader is left
    /// to end with the pipe).
    fn take(self, grace: Duration) -> Vec<u8> {
        let _ = self.done.recv_timeout(grace);
        std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Runs `sh -c cmd` with `env`, blocking, for at most `timeout` — or until `stop`
/// (haq was interrupted). The command runs in its own process group, killed when the
/// time is up or on stop; its output is waited for at most [`PIPE_GRACE`] after it
/// ended, so a descendant that escaped the group cannot hold haq.
pub fn run_sh(
    cmd: &str,
    env: &[(String, String)],
    timeout: Duration,
    stop: Option<&CancellationToken>,
) -> Ran {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: restore_in_child is async-signal-safe.
    unsafe {
        c.pre_exec(crate::priority::restore_in_child);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            return Ran {
                ok: false,
                status: format!("could not start: {e}"),
                output: String::new(),
            };
        }
    };
    // Read the pipes on their own threads so a chatty command never blocks.
    let ro = Drain::new(child.stdout.take());
    let re = Drain::new(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        let stopped = stop.is_some_and(CancellationToken::is_cancelled);
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if stopped || Instant::now() >= deadline => {
                // SAFETY: killpg on the group this child leads (process_group(0)).
                unsafe { libc::killpg(child.id() as i32, libc::SIGKILL) };
                let _ = child.wait();
                break Err(if stopped {
                    "stopped: haq was interrupted (process group killed)".to_string()
                } else {
                    format!("timed out after {timeout:?} (process group killed)")
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("wait failed: {e}")),
        }
    };
    let mut output = tail(&ro.take(PIPE_GRACE));
    let e = tail(&re.take(PIPE_GRACE));
    if !e.is_empty() {
        if !output.is_empty() {
            output.push_str(" | ");
        }
        output.push_str(&e);
    }
    match status {
        Ok(st) => Ran {
            ok: st.success(),
            status: match st.code() {
                Some(c) => format!("exit {c}"),
                None => format!("killed by {st}"),
            },
            output,
        },
        Err(s) => Ran {
            ok: false,
            status: s,
            output,
        },
    }
}

/// The environment every command of a fault sees.
pub fn env(f: &FaultPlan, r: &Replica, cx: &Context) -> Vec<(String, String)> {
    let pid = match r.process() {
        Some(crate::target::registry::ProcRef::Pid { pid, .. }) => Some(pid),
        Some(p @ crate::target::registry::ProcRef::PidFile(_)) => {
            crate::target::procs::resolve(&p).ok()
        }
        Some(crate::target::registry::ProcRef::Sim(sp)) => sp.try_lock().ok().map(|w| w.pid),
        None => None,
    };
    let v = vec![
        ("HAQ_FAULT", f.name.clone()),
        ("HAQ_DOMAIN", format!("{:?}", f.domain).to_lowercase()),
        ("HAQ_REPLICA", r.name.clone()),
        ("HAQ_NODE", r.node.clone().unwrap_or_default()),
        ("HAQ_PID", pid.map(|p| p.to_string()).unwrap_or_default()),
        ("HAQ_UPSTREAM", r.upstream().unwrap_or_default()),
        (
            "HAQ_LISTEN",
            r.proxy
                .as_ref()
                .map(|p| p.listen.to_string())
                .unwrap_or_default(),
        ),
        ("HAQ_PROBE_ID", cx.probe.clone().unwrap_or_default()),
        ("HAQ_RUN_DIR", cx.run_dir.display().to_string()),
        ("HAQ_SEED", cx.seed.to_string()),
        ("HAQ_T_US", cx.clock.now_us().to_string()),
    ];
    v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

async fn run_async(
    cmd: String,
    env: Vec<(String, String)>,
    timeout: Duration,
    stop: CancellationToken,
) -> Ran {
    tokio::task::spawn_blocking(move || run_sh(&cmd, &env, timeout, Some(&stop)))
        .await
        .unwrap_or_else(|e| Ran {
            ok: false,
            status: format!("command task failed: {e}"),
            output: String::new(),
        })
}

pub struct CommandInjector;

impl Injector for CommandInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let at = Instant::now();
            let Some(spec) = f.command.clone() else {
                return (Injected::failed(at, None, "no command given"), None);
            };
            let env = env(f, r, cx);
            let timeout = spec.timeout.0;
            // In the ledger before the command runs: if haq is killed while the fault
            // holds, `haq heal` runs the heal command.
            let entry = spec.heal.as_ref().map(|heal| {
                let remedy = super::ledger::Remedy::Command {
                    heal: heal.clone(),
                    env: env.clone(),
                    timeout_ms: timeout.as_millis() as u64,
                };
                (
                    cx.ledger.clone(),
                    cx.ledger.intend(&f.name, &r.name, remedy),
                )
            });
            let inject =
                run_async(spec.inject.clone(), env.clone(), timeout, cx.stop.clone()).await;
            // Whatever the inject did, even half, is undone by the heal command.
            let undo: Option<Box<dyn Undo>> = spec.heal.clone().map(|heal| {
                Box::new(RunHeal {
                    heal,
                    verify: spec.verify.clone(),
                    env: env.clone(),
                    timeout,
                    ledger: entry.clone(),
                }) as Box<dyn Undo>
            });
            if !inject.ok {
                return (Injected::failed(at, None, inject.describe("inject")), undo);
            }
            let inj = match (&spec.verify, f.verify) {
                (Some(v), true) => {
                    let ran = run_async(v.clone(), env, timeout, cx.stop.clone()).await;
                    Injected {
                        at,
                        pid: None,
                        verified: ran.ok,
                        detail: format!(
                            "{}; {}",
                            inject.describe("inject"),
                            ran.describe("verify")
                        ),
                    }
                }
                _ => Injected::failed(
                    at,
                    None,
                    format!(
                        "{}; not verified (no verify command, or verify: false)",
                        inject.describe("inject")
                    ),
                ),
            };
            (inj, undo)
        })
    }
}

/// Runs the heal command; when there is a verify command, the heal is verified by
/// the fault no longer verifying. A verified heal closes its ledger entry.
struct RunHeal {
    heal: String,
    verify: Option<String>,
    env: Vec<(String, String)>,
    timeout: Duration,
    ledger: Option<(std::sync::Arc<super::ledger::Ledger>, u64)>,
}

impl Undo for RunHeal {
    fn undo(&mut self) -> Healed {
        let h = self.heal_once();
        // Healed and verified: nothing is left for `haq heal`.
        if let (true, Some((l, id))) = (h.verified, &self.ledger) {
            l.healed(*id, &h.detail);
        }
        h
    }
}

impl RunHeal {
    fn heal_once(&self) -> Healed {
        let h = run_sh(&self.heal, &self.env, self.timeout, None);
        if !h.ok {
            return Healed {
                verified: false,
                detail: h.describe("heal"),
            };
        }
        match &self.verify {
            Some(v) => {
                let still = run_sh(v, &self.env, self.timeout, None);
                Healed {
                    verified: !still.ok,
                    detail: format!(
                        "{}; verify now {} ({})",
                        h.describe("heal"),
                        still.status,
                        if still.ok {
                            "fault still in effect"
                        } else {
                            "fault gone"
                        }
                    ),
                }
            }
            None => Healed {
                verified: true,
                detail: h.describe("heal"),
            },
        }
    }
}
