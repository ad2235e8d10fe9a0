//! Resetting the connections a NetworkPolicy leaves established (many CNIs keep a
//! connection's conntrack entry: the gateway's kept-alive connections to an isolated
//! pod may go on working): `proxy` — haq's proxy in front of the replica resets
//! (RST) every connection of that replica, the gateway's to it and its own to the pod,
//! and new ones meet the policy — or a command exec'd in the pod (`ss -K` in a
//! container with NET_ADMIN), verified by its exit 0.

use std::time::Duration;

use super::super::backend::VERIFY_TIMEOUT;
use crate::proxy::{ReplicaProxy, Rule};
use crate::scenario::ResetConnections;
use crate::target::kube::exec::{exec, what};
use crate::target::kube::pod::PodRef;
use crate::target::registry::Replica;

/// Longest a reset's exec may take.
const EXEC_TIMEOUT: Duration = Duration::from_secs(10);

/// Resets the replica's established connections as `how` says; how, or why not.
pub async fn reset(p: &PodRef, r: &Replica, how: &ResetConnections) -> Result<String, String> {
    match how {
        ResetConnections::Word(_) => match &r.proxy {
            Some(proxy) => by_proxy(proxy).await,
            None => Err(format!(
                "replica {} has no proxy of haq in front of it",
                r.name
            )),
        },
        ResetConnections::Exec { exec, container } => {
            let c = container.as_deref().unwrap_or(&p.pod.container);
            by_exec(p, c, exec).await
        }
    }
}

/// A reset rule on the replica's proxy until every live connection applied it (each
/// is reset), then removed: new connections are forwarded again — into the policy.
async fn by_proxy(proxy: &ReplicaProxy) -> Result<String, String> {
    let open = proxy.connections();
    let (id, epoch) = proxy.add_rule(Rule::Reset);
    let applied = proxy.applied(epoch, VERIFY_TIMEOUT).await;
    proxy.remove_rule(id);
    match applied {
        Ok(_) => Ok(format!(
            "haq's proxy on {} reset its {open} established connection(s) of the replica (new ones meet the policy)",
            proxy.listen
        )),
        Err(behind) => Err(format!(
            "{behind} connection(s) of haq's proxy on {} had not reset after {VERIFY_TIMEOUT:?}",
            proxy.listen
        )),
    }
}

/// Exec's `command` in container `c` of the pod, verified by its exit 0.
async fn by_exec(p: &PodRef, c: &str, command: &[String]) -> Result<String, String> {
    let cl = &p.cluster;
    let ran = exec(
        &cl.client,
        &cl.namespace,
        &p.pod.name,
        c,
        command,
        EXEC_TIMEOUT,
    )
    .await;
    let d = ran.describe(&what(&p.pod.name, c, command));
    if ran.ok() { Ok(d) } else { Err(d) }
}
