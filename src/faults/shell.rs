//! Running the user's shell commands (`sh -c`) for the command backend and the heal
//! ledger: in their own process group, bounded by a timeout and by haq's interrupt, the
//! output bounded and never waited for past the command's end.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::target::group;

/// Why a command was not run, or stopped, after a second SIGINT/SIGTERM (the first,
/// for `haq heal`).
const ABANDONED: &str = "haq was told to end at once";

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
/// (haq was interrupted) or a second signal ([`group::abandon`]; then nothing new
/// starts). The command runs in its own process group ([`group::sh`]), killed when the
/// time is up or on stop; its output is waited for at most [`PIPE_GRACE`] after it
/// ended, so a descendant that escaped the group cannot hold haq.
pub fn run_sh(
    cmd: &str,
    env: &[(String, String)],
    timeout: Duration,
    stop: Option<&CancellationToken>,
) -> Ran {
    if group::abandoned() {
        return Ran {
            ok: false,
            status: format!("not run: {ABANDONED}"),
            output: String::new(),
        };
    }
    let mut c = group::sh(cmd);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
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
    // Known while it runs: a second signal, or haq's end, ends it.
    let grp = group::Group::of(child.id());
    // Read the pipes on their own threads so a chatty command never blocks.
    let ro = Drain::new(child.stdout.take());
    let re = Drain::new(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        let stopped = stop.is_some_and(CancellationToken::is_cancelled);
        let abandoned = group::abandoned();
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) if stopped || abandoned || Instant::now() >= deadline => {
                grp.kill();
                let _ = child.wait();
                break Err(if abandoned {
                    format!("stopped: {ABANDONED} (process group killed)")
                } else if stopped {
                    "stopped: haq was interrupted (process group killed)".to_string()
                } else {
                    format!("timed out after {timeout:?} (process group killed)")
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("wait failed: {e}")),
        }
    };
    drop(grp);
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
