//! One command exec'd in a pod's container (`pods/P/exec`, a websocket upgrade of a
//! GET): its output read while it runs (a full pipe would stall it), its exit status
//! from the API's status channel, the whole bounded by a timeout. The faults' exec
//! commands, a network fault's `reset_connections` exec and the heal of an exec fault
//! (in the run and in `haq heal`) all run through [`exec`].

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use tokio::io::{AsyncReadExt, ReadHalf, SimplexStream};

use super::calls;

/// How much of each output stream is kept for the trace.
const KEEP: usize = 2048;

/// How an exec ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ran {
    /// The API refused it (RBAC, no such container, the pod gone): nothing ran.
    Refused(String),
    /// No exit status: the stream failed, ended without one (the container died under
    /// it) or the timeout passed.
    Lost(String),
    /// The command ended: exit 0 (`Success`) or not, and what it printed.
    Ended {
        ok: bool,
        status: String,
        output: String,
    },
}

impl Ran {
    /// The command ran and exited 0.
    pub fn ok(&self) -> bool {
        matches!(self, Ran::Ended { ok: true, .. })
    }

    /// `exec `CMD` in POD/CONTAINER: how it ended[: output]`.
    pub fn describe(&self, what: &str) -> String {
        match self {
            Ran::Refused(why) => format!("{what} refused: {why}"),
            Ran::Lost(why) => format!("{what}: {why}"),
            Ran::Ended { status, output, .. } if output.is_empty() => format!("{what}: {status}"),
            Ran::Ended { status, output, .. } => format!("{what}: {status}; output: {output}"),
        }
    }
}

/// `exec `CMD` in POD/CONTAINER`, as the trace names an exec.
pub fn what(pod: &str, container: &str, command: &[String]) -> String {
    format!("exec `{}` in {pod}/{container}", command.join(" "))
}

/// Exec's `command` in `container` of pod `pod`, for at most `timeout`.
pub async fn exec(
    client: &kube::Client,
    ns: &str,
    pod: &str,
    container: &str,
    command: &[String],
    timeout: Duration,
) -> Ran {
    let api: kube::Api<Pod> = kube::Api::namespaced(client.clone(), ns);
    let ap = calls::attach_params(container);
    let run = async {
        let mut proc = match api.exec(pod, command.to_vec(), &ap).await {
            Ok(p) => p,
            Err(kube::Error::Api(s)) => {
                return Ran::Refused(format!("{} {}: {}", s.code, s.reason, s.message));
            }
            Err(e) => return Ran::Lost(format!("the exec stream failed ({e})")),
        };
        let (out, err) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
        let (stdout, stderr) = (proc.stdout(), proc.stderr());
        let status = proc.take_status();
        let status = async {
            match status {
                Some(s) => s.await,
                None => None,
            }
        };
        let reads = async {
            tokio::join!(drain(stdout, &out), drain(stderr, &err));
        };
        let (mut status, mut reads) = (std::pin::pin!(status), std::pin::pin!(reads));
        let mut read_all = false;
        let got = tokio::select! {
            s = &mut status => s,
            _ = &mut reads => {
                read_all = true;
                status.await
            }
        };
        if !read_all {
            // The status is in; the output still in flight follows at once.
            let _ = tokio::time::timeout(Duration::from_millis(500), reads).await;
        }
        let text = |m: &Mutex<Vec<u8>>| {
            let b = m.lock().unwrap_or_else(|e| e.into_inner());
            String::from_utf8_lossy(&b).trim().to_string()
        };
        let output = [text(&out), text(&err)]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(" | ");
        match got {
            Some(s) => ended(s, output),
            None if output.is_empty() => Ran::Lost("the exec ended without an exit status".into()),
            None => Ran::Lost(format!(
                "the exec ended without an exit status; output: {output}"
            )),
        }
    };
    match tokio::time::timeout(timeout, run).await {
        Ok(ran) => ran,
        Err(_) => Ran::Lost(format!("no exit status within {timeout:?}")),
    }
}

/// Reads one output stream to its end, keeping its first [`KEEP`] bytes.
async fn drain(r: Option<ReadHalf<SimplexStream>>, into: &Mutex<Vec<u8>>) {
    let Some(mut r) = r else { return };
    let mut chunk = [0u8; 1024];
    while let Ok(n @ 1..) = r.read(&mut chunk).await {
        let mut b = into.lock().unwrap_or_else(|e| e.into_inner());
        let room = KEEP.saturating_sub(b.len());
        b.extend_from_slice(&chunk[..n.min(room)]);
    }
}

/// The exit status the API sent: `Success`, or the exit code and the message.
fn ended(s: Status, output: String) -> Ran {
    if s.status.as_deref() == Some("Success") {
        return Ran::Ended {
            ok: true,
            status: "exit 0".into(),
            output,
        };
    }
    let code = s
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
        .and_then(|c| c.message.clone());
    let status = match code {
        Some(c) => format!("exit {c}"),
        None => format!(
            "{} {}",
            s.status.unwrap_or_default(),
            s.message.unwrap_or_default()
        )
        .trim()
        .to_string(),
    };
    Ran::Ended {
        ok: false,
        status,
        output,
    }
}
