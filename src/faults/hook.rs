//! The sim worker's own fault hooks (`POST /admin/faults`): exact engine points for a
//! probe request — `prefill`, `before_event k` (computed, not written),
//! `after_tool_call`. The probe waits at haq's proxy while the hook is armed on the
//! worker it was routed to; the worker then SIGKILLs itself at the point. The kill is
//! verified by the process's exit (signal 9) and dated by the worker's own journal line
//! written just before it.

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::Replica;
use super::backend::Injected;
use super::env::{Env, Fired};
use super::fire;
use crate::plan::FaultPlan;
use crate::proxy::Release;
use crate::scenario::ProbePoint;
use crate::target::registry::ProcRef;
use crate::wire::journal::{Stamped, WorkerEntry, read_lines};

fn hook_point(p: ProbePoint) -> (&'static str, u32) {
    match p {
        ProbePoint::Prefill => ("prefill", 0),
        // The hook counts output events from 0.
        ProbePoint::ComputedNotSent(k) => ("before_event", k.saturating_sub(1)),
        _ => ("after_tool_call", 0),
    }
}

/// Arms the hook on the replica serving the probe, releases the probe to it, and
/// records the crash when it comes.
pub async fn fire(
    f: &FaultPlan,
    env: &Env,
    point: ProbePoint,
    serving: String,
    mut fired: Fired,
    release: Option<oneshot::Sender<Release>>,
    within: Duration,
) {
    let let_go = |r: Option<oneshot::Sender<Release>>| {
        if let Some(r) = r {
            let _ = r.send(Release::Forward);
        }
    };
    let r = match fire::probe_targets(f, env, &serving) {
        Ok(t) if t.len() == 1 => t[0].clone(),
        Ok(_) | Err(_) => {
            let_go(release);
            let why = format!("the probe went to `{serving}`, which is not one target replica");
            return fire::missed(f, env, serving, fired.probe.clone(), why);
        }
    };
    let (name, k) = hook_point(point);
    let armed = arm(env, &r, name, k, fired.probe.as_deref().unwrap_or_default()).await;
    let_go(release);
    let id = match armed {
        Ok(id) => id,
        Err(e) => return fire::missed(f, env, r.name.clone(), fired.probe.clone(), e),
    };
    fired.trigger = format!(
        "{}; hook {name} k={k} armed on {} ({id})",
        fired.trigger, r.name
    );
    let inj = crashed(env, &r, &id, within).await;
    if inj.verified
        && let Some(p) = &r.proxy
    {
        p.check_dead().await;
    }
    fire::record(f, env, &r, inj, &fired);
    fire::after(f, env, &[r], Vec::new()).await;
}

async fn arm(
    env: &Env,
    r: &Replica,
    point: &str,
    k: u32,
    request_id: &str,
) -> Result<String, String> {
    let url = r
        .direct_url()
        .map(|u| format!("{u}/admin/faults"))
        .ok_or("the replica's address is unknown")?;
    let http = &env.admin;
    let body =
        serde_json::json!({"point": point, "k": k, "request_id": request_id, "action": "crash"});
    let resp = http
        .post(&url)
        .json(&body)
        .send()
        .await
        .map_err(|e| format!("arming the hook at {url}: {e}"))?;
    let status = resp.status();
    let v: serde_json::Value = resp.json().await.unwrap_or_default();
    match v["armed"].as_str() {
        Some(id) if status.is_success() => Ok(id.to_string()),
        _ => Err(format!("arming the hook at {url}: HTTP {status} {v}")),
    }
}

/// Waits for the worker to crash at its hook: exit by SIGKILL, with the hook's
/// `fault_fired` journal line giving the exact time.
async fn crashed(env: &Env, r: &Replica, id: &str, within: Duration) -> Injected {
    let start = Instant::now();
    let Some(ProcRef::Sim(sp)) = r.process() else {
        return Injected::failed(start, None, "hooks need a sim worker");
    };
    let (pid, status) = loop {
        let mut w = sp.lock().await;
        let pid = w.pid;
        if let Some(st) = w.exited() {
            break (pid, st);
        }
        drop(w);
        if start.elapsed() > within || env.load_done.is_cancelled() {
            return Injected::failed(
                start,
                Some(pid),
                format!(
                    "hook {id} armed; the worker did not crash within {within:?} (the probe never reached the point)"
                ),
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    let journal = env.run_dir.join(crate::trace::files::worker_file(&r.name));
    let stamp = read_lines::<Stamped<WorkerEntry>>(&journal)
        .ok()
        .and_then(Result::ok)
        .into_iter()
        .flatten()
        .find_map(|l| match l.entry {
            WorkerEntry::FaultFired {
                id: fid,
                req,
                attempt,
                ..
            } if fid == id => Some((l.t_ns, req, attempt)),
            _ => None,
        });
    let at = stamp
        .as_ref()
        .map(|s| env.clock.instant_at(env.clock.us_from_mono_ns(s.0)))
        .unwrap_or_else(Instant::now);
    match (status.signal(), stamp) {
        (Some(libc::SIGKILL), Some((_, req, attempt))) => Injected {
            at,
            pid: Some(pid),
            verified: true,
            detail: format!(
                "the worker's hook {id} fired on {req}{} and it exited by signal 9",
                attempt.map(|a| format!(" ({a})")).unwrap_or_default()
            ),
        },
        (sig, stamp) => Injected::failed(
            at,
            Some(pid),
            format!(
                "the worker exited ({status}, signal {sig:?}) {} its hook's journal line",
                if stamp.is_some() { "with" } else { "without" }
            ),
        ),
    }
}
