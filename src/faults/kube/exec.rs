//! Exec faults of the kubernetes backend (`exec:`): the fault's commands run in a
//! container of the replica's pod (`pods/P/exec`) — the engine killed (`kill`, domain
//! `process` / `gpu`), a named process stopped (`freeze`: SIGSTOP of the engine core
//! only, SIGCONT to heal), the engine core killed behind a live API server
//! (`gpu_lost`), a slower replica (`slow`: a `tc` delay). The pod is read first (still
//! the replica's, the container in it); the inject must exit 0 (a kill may end with its
//! container). Verified by the fault's own `verify` exec (exit 0 = applied), else for a
//! kill by the engine container's restart count rising, for `gpu_lost` by the pod's
//! readiness path answering an error with the container not restarted. A fault with a
//! `heal` is in the heal ledger before its inject runs; the heal is exec'd in the same
//! pod when the fault ends (its duration, the end of the load, an error, Ctrl-C) or by
//! `haq heal RUN_DIR`, and verified by its exit 0 and the `verify` no longer passing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::backend::{Context, Injected, VERIFY_TIMEOUT};
use super::super::guard::{Healed, Undo};
use super::super::ledger::{Ledger, Remedy};
use super::pods::{self, Now, POLL};
use super::undo::heal_within;
use crate::plan::FaultPlan;
use crate::scenario::{ExecSteps, FaultAction as A};
use crate::target::kube::cluster::Cluster;
use crate::target::kube::exec::{Ran, exec, what};
use crate::target::kube::heal::{ExecAt, exec_heal};
use crate::target::kube::pod::PodRef;
use crate::target::registry::Replica;

/// Runs exec fault `f` on the replica's pod `p`.
pub async fn fault(
    p: &PodRef,
    f: &FaultPlan,
    r: &Replica,
    cx: &Context,
) -> (Injected, Option<Box<dyn Undo>>) {
    let Some(s) = f.exec.clone() else {
        return (
            Injected::failed(Instant::now(), None, "no exec given"),
            None,
        );
    };
    let container = s
        .container
        .clone()
        .unwrap_or_else(|| p.pod.container.clone());
    let before = match ready(p, &container).await {
        Ok(n) => n,
        Err(why) => return (Injected::failed(Instant::now(), None, why), None),
    };
    let c = &p.cluster;
    let at_pod = ExecAt {
        namespace: c.namespace.clone(),
        pod: p.pod.name.clone(),
        uid: p.pod.uid.clone(),
        container: container.clone(),
    };
    let undo = heal_of(c, &at_pod, &s, f, r, cx);
    let at = Instant::now();
    let timeout = s.timeout.0;
    let ran = exec(
        &c.client,
        &c.namespace,
        &p.pod.name,
        &container,
        &s.inject,
        timeout,
    )
    .await;
    let said = ran.describe(&what(&p.pod.name, &container, &s.inject));
    if let Ran::Refused(_) = ran {
        // Nothing ran: nothing to heal.
        if let Some(u) = undo {
            cx.ledger
                .healed(u.ledger.1, "the inject was refused: nothing ran");
        }
        return (Injected::failed(at, None, said), None);
    }
    let undo = undo.map(|u| Box::new(u) as Box<dyn Undo>);
    // A kill may take its container, and the exec's status, with it.
    if f.action != A::Kill && !ran.ok() {
        return (
            Injected::failed(at, None, format!("{said}: not applied")),
            undo,
        );
    }
    let verdict = match (&s.verify, f.action) {
        _ if !f.verify => Err("not verified (verify: false)".to_string()),
        (Some(v), _) => {
            let ran = exec(&c.client, &c.namespace, &p.pod.name, &container, v, timeout).await;
            let d = ran.describe(&format!("verify: {}", what(&p.pod.name, &container, v)));
            if ran.ok() { Ok(d) } else { Err(d) }
        }
        (None, A::Kill) => pods::restarted(p, before, at).await,
        (None, A::GpuLost) => engine_dead(p, r, cx, before, at).await,
        (None, _) => Err("no verify exec".to_string()),
    };
    let inj = match verdict {
        Ok(d) => Injected {
            at,
            pid: None,
            verified: true,
            detail: format!("{said}; {d}"),
        },
        Err(why) => Injected::failed(at, None, format!("{said}; not verified: {why}")),
    };
    (inj, undo)
}

/// The pod is still the replica's and has `container`: the engine container's
/// restart count now.
async fn ready(p: &PodRef, container: &str) -> Result<i32, String> {
    let name = &p.pod.name;
    match pods::read(p).await {
        Ok(Now::There(pod)) => {
            // Its containers, native sidecars (init containers that keep running) and
            // ephemeral debug containers: any of them can be exec'd in.
            let names: Vec<&str> = pod
                .spec
                .as_ref()
                .map(|s| {
                    let main = s.containers.iter().map(|c| c.name.as_str());
                    let init = s.init_containers.iter().flatten().map(|c| c.name.as_str());
                    let debug = s.ephemeral_containers.iter().flatten();
                    main.chain(init)
                        .chain(debug.map(|c| c.name.as_str()))
                        .collect()
                })
                .unwrap_or_default();
            if !names.contains(&container) {
                return Err(format!(
                    "pod {name} has no container {container} (its containers: {})",
                    names.join(", ")
                ));
            }
            Ok(crate::target::kube::discover::restarts(
                &pod,
                &p.pod.container,
            ))
        }
        Ok(Now::Gone) => Err(format!("pod {name} is gone")),
        Ok(Now::Replaced(uid)) => Err(format!("pod {name} was replaced (uid {uid})")),
        Err(e) => Err(format!("reading pod {name}: {e}")),
    }
}

/// The fault's heal, if it has one, in the ledger before the inject runs.
fn heal_of(
    c: &Arc<Cluster>,
    at: &ExecAt,
    s: &ExecSteps,
    f: &FaultPlan,
    r: &Replica,
    cx: &Context,
) -> Option<ExecHeal> {
    let heal = s.heal.as_ref()?;
    let remedy = Remedy::KubeExec {
        context: c.context.clone(),
        namespace: at.namespace.clone(),
        pod: at.pod.clone(),
        uid: at.uid.clone(),
        container: at.container.clone(),
        heal: heal.to_vec(),
        timeout_ms: s.timeout.0.as_millis() as u64,
    };
    let entry = cx.ledger.intend(&f.name, &r.name, remedy);
    Some(ExecHeal {
        cluster: c.clone(),
        at: at.clone(),
        heal: heal.to_vec(),
        verify: s.verify.clone().filter(|_| f.verify),
        timeout: s.timeout.0,
        ledger: (cx.ledger.clone(), entry),
    })
}

/// A `gpu_lost` with no `verify`: the pod's readiness path answers an error (the API
/// server lives, its engine does not) while the engine container has not restarted.
async fn engine_dead(
    p: &PodRef,
    r: &Replica,
    cx: &Context,
    before: i32,
    at: Instant,
) -> Result<String, String> {
    let Some(base) = r.direct_url() else {
        return Err("the replica has no address to read its readiness path at".into());
    };
    let url = format!("{base}{}", r.ready_path);
    let start = Instant::now();
    loop {
        let last = match cx
            .http
            .get(&url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
        {
            Ok(resp) if !resp.status().is_success() => {
                let status = resp.status().as_u16();
                let container = &p.pod.container;
                return match pods::read(p).await {
                    Ok(Now::There(pod)) => {
                        let n = crate::target::kube::discover::restarts(&pod, container);
                        if n == before {
                            Ok(format!(
                                "GET {url} answered {status} after {:.0}ms (the API server alive, its engine dead); container {container} not restarted ({n} restarts)",
                                at.elapsed().as_secs_f64() * 1e3
                            ))
                        } else {
                            Err(format!(
                                "container {container} restarted ({before} → {n} restarts): the whole server died, not only its engine"
                            ))
                        }
                    }
                    Ok(_) => Err(format!("pod {} is gone", p.pod.name)),
                    Err(e) => Err(format!("reading pod {}: {e}", p.pod.name)),
                };
            }
            Ok(resp) => format!("GET {url} still answers {}", resp.status().as_u16()),
            Err(e) => format!("GET {url}: {e}"),
        };
        if start.elapsed() >= VERIFY_TIMEOUT {
            return Err(format!(
                "{last} after {VERIFY_TIMEOUT:?} (pod IPs are reachable from inside the cluster only: else give `exec.verify`)"
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Exec's the heal where the fault ran; a verified heal closes the ledger entry.
pub struct ExecHeal {
    cluster: Arc<Cluster>,
    at: ExecAt,
    heal: Vec<String>,
    verify: Option<Vec<String>>,
    timeout: Duration,
    ledger: (Arc<Ledger>, u64),
}

impl Undo for ExecHeal {
    fn undo(&mut self) -> Healed {
        let c = self.cluster.clone();
        let (at, heal, verify, timeout) = (
            self.at.clone(),
            self.heal.clone(),
            self.verify.clone(),
            self.timeout,
        );
        let late = format!("the heal `{}` did not finish", self.heal.join(" "));
        // The pod read, the heal and the verify, each within the timeout.
        let limit = timeout * 2 + Duration::from_secs(10);
        heal_within(&self.cluster, &self.ledger, limit, late, async move {
            exec_heal(&c.client, &at, &heal, verify.as_deref(), timeout).await
        })
    }
}
