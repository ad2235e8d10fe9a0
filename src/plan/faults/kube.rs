//! The kubernetes backend's own fault parameters, each given only with the fault that
//! reads it: a network fault's `reset_connections` (haq's proxy in front of every
//! target replica, or a command to exec), a `worker` kill's `grace`.

use super::context::Ctx;
use crate::scenario::{
    FailureDomain, Fault, FaultAction, FaultBackend, Issue, KubeReplacement, ResetConnections,
};

/// `grace` with a `worker` kill of the kubernetes backend only, whose pod is deleted
/// (with `replacement: scale` the scale-down removes it with its own grace anyway).
fn grace(cx: &Ctx, field: &str, f: &Fault) -> Result<(), Issue> {
    if f.grace.is_none() {
        return Ok(());
    }
    let kill = f.backend == FaultBackend::Kubernetes
        && f.domain == FailureDomain::Worker
        && f.action.unwrap_or(FaultAction::Kill) == FaultAction::Kill;
    let scale =
        cx.s.target
            .kubernetes
            .as_ref()
            .is_some_and(|k| k.replacement == KubeReplacement::Scale);
    if !kill || scale {
        return Err(Issue::missing(
            format!("{field}.grace"),
            "is only for a `worker` kill of the kubernetes backend that deletes the pod (not with `replacement: scale`)",
        ));
    }
    Ok(())
}

/// The kubernetes parameters of fault `f` on `replicas` (empty: the probe's replica).
pub(super) fn kube_params(
    cx: &Ctx,
    field: &str,
    f: &Fault,
    replicas: &[String],
) -> Result<(), Issue> {
    grace(cx, field, f)?;
    let Some(reset) = &f.reset_connections else {
        return Ok(());
    };
    let field = format!("{field}.reset_connections");
    let policy = f.action.is_none_or(|a| a == FaultAction::Blackhole);
    if f.backend != FaultBackend::Kubernetes || f.domain != FailureDomain::Network || !policy {
        return Err(Issue::missing(
            field,
            "is only for `backend: kubernetes` blackholes of domain `network` (the connections a NetworkPolicy leaves established)",
        ));
    }
    match reset {
        ResetConnections::Word(_) => {
            let names: Vec<&str> = if replicas.is_empty() {
                cx.decls.iter().map(|d| d.name.as_str()).collect()
            } else {
                replicas.iter().map(String::as_str).collect()
            };
            match names
                .iter()
                .find(|r| !cx.decl(r).is_some_and(|d| cx.has_proxy(d)))
            {
                Some(r) => Err(Issue::new(
                    field,
                    "proxy",
                    format!(
                        "needs haq's proxy in front of replica `{r}`: give its address in target.kubernetes.proxies"
                    ),
                )),
                None => Ok(()),
            }
        }
        ResetConnections::Exec { exec, container } => {
            if exec.first().is_none_or(|c| c.trim().is_empty()) {
                return Err(Issue::missing(format!("{field}.exec"), "is empty"));
            }
            match container {
                Some(c) if !crate::plan::kubernetes::dns_label_ok(c) => Err(Issue::new(
                    format!("{field}.container"),
                    c,
                    "is not a container name",
                )),
                _ => Ok(()),
            }
        }
    }
}
