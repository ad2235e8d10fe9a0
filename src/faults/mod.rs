//! Fault injection. Every injection is verified (the process is gone, …) and the
//! verification is recorded in the trace: a fault that did not take effect is never a
//! silent pass.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::scenario::{FaultAction, FaultPlan};
use crate::sim::cluster::SharedProcess;

/// What an injection did, as recorded in the trace.
#[derive(Debug, Clone)]
pub struct Injected {
    /// When the fault was applied (the signal sent).
    pub at: std::time::Instant,
    pub pid: Option<u32>,
    pub verified: bool,
    pub detail: String,
}

/// How long a killed process may take to disappear before the kill counts as failed.
pub const VERIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Applies `f` to a sim worker process.
pub async fn inject_process(proc_: &SharedProcess, f: &FaultPlan) -> Injected {
    let mut p = proc_.lock().await;
    let pid = Some(p.pid);
    let at = std::time::Instant::now();
    let done = |verified: bool, detail: String| Injected {
        at,
        pid,
        verified,
        detail,
    };
    match f.action {
        FaultAction::Kill => {
            if let Some(st) = p.exited() {
                return done(
                    false,
                    format!("process had already exited ({st}) before the kill"),
                );
            }
            if let Err(e) = p.signal(Signal::SIGKILL) {
                return done(false, format!("SIGKILL failed: {e}"));
            }
            match p.wait_exit(VERIFY_TIMEOUT).await {
                Some(st) if st.signal() == Some(libc::SIGKILL) => {
                    done(true, "SIGKILL sent; process exited by signal 9".into())
                }
                Some(st) => done(
                    false,
                    format!("SIGKILL sent; process exited otherwise ({st})"),
                ),
                None => done(
                    false,
                    format!("SIGKILL sent; process still alive after {VERIFY_TIMEOUT:?}"),
                ),
            }
        }
    }
}
