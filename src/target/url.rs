//! A deployment haq reaches (`target.kind: url`): its declared replicas, checked before
//! anything starts (their processes exist, their upstreams accept connections), with
//! haq's proxy listening in front of those that declare `listen`.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};

use super::procs;
use super::registry::{ProcRef, Registry, Replica, Respawn};
use crate::plan::Plan;
use crate::proxy::{ProxySet, ProxySpec};
use crate::trace::{Clock, TraceWriter};

/// The declared replicas of a `url` target, checked before anything starts (their
/// processes exist, their upstreams accept connections) and with haq's proxy
/// listening in front of those that declare `listen`.
pub async fn replicas(
    plan: &Plan,
    tw: &TraceWriter,
    clock: &Clock,
) -> anyhow::Result<(Arc<Registry>, Option<ProxySet>)> {
    let mut specs = Vec::new();
    let mut procs = Vec::new();
    for d in &plan.replica_decls {
        let up = d.upstream.clone().unwrap_or_default();
        tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&up))
            .await
            .map_err(|_| {
                anyhow!(
                    "replica {}: upstream {up} did not accept a connection within 5s",
                    d.name
                )
            })?
            .with_context(|| format!("replica {}: upstream {up} is not reachable", d.name))?;
        let proc_ref = match &d.process {
            None => None,
            Some(p) => Some(match (p.pid, &p.pid_file) {
                (Some(pid), _) => {
                    let (state, start) = procs::proc_stat(pid).ok_or_else(|| {
                        anyhow!("replica {}: process {pid} does not exist", d.name)
                    })?;
                    if matches!(state, 'Z' | 'X') {
                        anyhow::bail!("replica {}: process {pid} has exited", d.name);
                    }
                    ProcRef::Pid {
                        pid,
                        start: Some(start),
                    }
                }
                (None, Some(f)) => {
                    let r = ProcRef::PidFile(f.into());
                    let pid = procs::resolve(&r).map_err(|e| anyhow!("replica {}: {e}", d.name))?;
                    if procs::gone(pid) {
                        anyhow::bail!(
                            "replica {}: pid file {f} names pid {pid}, which is not running",
                            d.name
                        );
                    }
                    r
                }
                (None, None) => anyhow::bail!("replica {}: process needs pid or pid_file", d.name),
            }),
        };
        procs.push(proc_ref);
        if let Some(l) = &d.listen {
            specs.push(ProxySpec {
                name: d.name.clone(),
                listen: l
                    .parse()
                    .with_context(|| format!("replica {}: listen {l}", d.name))?,
                upstream: Some(up),
            });
        }
    }
    let proxies = if specs.is_empty() {
        None
    } else {
        Some(ProxySet::start(&specs, tw, clock).await?)
    };
    let replicas = plan
        .replica_decls
        .iter()
        .zip(procs)
        .map(|(d, p)| {
            Arc::new(Replica {
                name: d.name.clone(),
                node: d.node.clone(),
                process: std::sync::Mutex::new(p),
                proxy: proxies.as_ref().and_then(|s| s.get(&d.name).cloned()),
                direct_url: std::sync::RwLock::new(
                    d.upstream.as_ref().map(|u| format!("http://{u}")),
                ),
                ready_path: d
                    .process
                    .as_ref()
                    .map_or_else(|| "/health".to_string(), |p| p.ready_path.clone()),
                restart_cmd: d.process.as_ref().and_then(|p| p.restart.clone()),
            })
        })
        .collect();
    Ok((
        Arc::new(Registry {
            replicas,
            respawn: Respawn::Command,
        }),
        proxies,
    ))
}
