//! The fault's targets (`target.replica` or `target.node`) among the declared
//! replicas — the blast-radius guard — and whether its backend can reach them.

use super::context::Ctx;
use super::types::Trigger;
use crate::scenario::{FailureDomain, Fault, FaultBackend, Issue};

/// The replicas the fault removes and the node it hits; no replica when a probe
/// picks the replica serving it.
pub(super) fn targets(
    cx: &Ctx,
    field: &str,
    f: &Fault,
    trigger: &Trigger,
) -> Result<(Vec<String>, Option<String>), Issue> {
    let Some(t) = &f.target else {
        if matches!(trigger, Trigger::Probe { .. }) {
            return Ok((Vec::new(), None));
        }
        return Err(Issue::missing(
            format!("{field}.target"),
            "is required (a `replica` or a `node`), unless a probe trigger picks the replica serving the probe",
        ));
    };
    gpu(cx, field, f, t.gpu)?;
    match (&t.replica, &t.node) {
        (Some(r), None) => {
            if cx.decl(r).is_none() {
                return Err(Issue::new(
                    format!("{field}.target.replica"),
                    r,
                    format!("no such replica (the target has {})", cx.names()),
                ));
            }
            // A pod's node is discovered: a kubernetes node fault names a replica and
            // hits the node it runs on.
            if f.domain == FailureDomain::Node && !cx.kube() {
                return Err(Issue::missing(
                    format!("{field}.target.node"),
                    "is required for domain `node` (a node fault removes every replica of the node)",
                ));
            }
            Ok((vec![r.clone()], None))
        }
        (None, Some(n)) if cx.kube() => Err(Issue::new(
            format!("{field}.target.node"),
            n,
            "a pod's node is discovered at the start: name a replica (`target.replica`), and the node fault hits the node it runs on",
        )),
        (None, Some(n)) => {
            let on: Vec<String> = cx
                .decls
                .iter()
                .filter(|d| d.node.as_deref() == Some(n.as_str()))
                .map(|d| d.name.clone())
                .collect();
            if on.is_empty() {
                return Err(Issue::new(
                    format!("{field}.target.node"),
                    n,
                    "no replica is declared on this node (give replicas a `node`)",
                ));
            }
            if f.domain != FailureDomain::Node && f.domain != FailureDomain::Network {
                return Err(Issue::new(
                    format!("{field}.domain"),
                    format!("{:?}", f.domain).to_lowercase(),
                    "a fault on a whole node is `domain: node` (or `network` for its paths)",
                ));
            }
            Ok((on, Some(n.clone())))
        }
        _ => Err(Issue::missing(
            format!("{field}.target"),
            "needs exactly one of `replica` or `node`",
        )),
    }
}

/// `target.gpu`: with domain `gpu` only, and (sim) inside the engine's tensor-parallel
/// group.
fn gpu(cx: &Ctx, field: &str, f: &Fault, gpu: Option<u32>) -> Result<(), Issue> {
    let Some(g) = gpu else { return Ok(()) };
    if f.domain != FailureDomain::Gpu {
        return Err(Issue::missing(
            format!("{field}.target.gpu"),
            "names a GPU of the replica: only for `domain: gpu`",
        ));
    }
    let tp = cx.s.target.engine.tensor_parallel_size.max(1);
    if cx.sim() && g >= tp {
        return Err(Issue::new(
            format!("{field}.target.gpu"),
            g,
            format!(
                "the sim engine's tensor-parallel group has {tp} GPU{} (0..{}; set `target.engine.tensor_parallel_size`)",
                if tp == 1 { "" } else { "s" },
                tp - 1
            ),
        ));
    }
    Ok(())
}

/// The backend can act on declared replica `r`: a process to signal, a proxy to cut.
pub(super) fn reachable(
    cx: &Ctx,
    field: &str,
    backend: FaultBackend,
    r: &str,
) -> Result<(), Issue> {
    let Some(d) = cx.decl(r) else {
        return Ok(());
    };
    match backend {
        FaultBackend::Kubernetes if !cx.kube() => Err(Issue::missing(
            format!("{field}.backend"),
            "the kubernetes backend acts on the pods of a `kind: kubernetes` target",
        )),
        FaultBackend::Process if cx.kube() => Err(Issue::missing(
            format!("{field}.backend"),
            "the pods of a kubernetes target are faulted through the API: use `backend: kubernetes`",
        )),
        FaultBackend::Process if !cx.sim() && d.process.is_none() => Err(Issue::missing(
            format!("{field}.backend"),
            format!(
                "the process backend needs replica `{r}` to declare `process: {{pid | pid_file}}`"
            ),
        )),
        FaultBackend::Engine if !cx.sim() => Err(Issue::missing(
            format!("{field}.backend"),
            "the engine backend acts on the sim's workers (`kind: sim`); for other engines use a `command` recipe (docs/evidence.md)",
        )),
        FaultBackend::Proxy if !cx.has_proxy(d) => Err(Issue::missing(
            format!("{field}.backend"),
            if cx.kube() {
                format!(
                    "the proxy backend needs haq's proxy in front of replica `{r}`: give its address in target.kubernetes.proxies"
                )
            } else {
                format!(
                    "the proxy backend needs replica `{r}` to declare `listen` (haq's proxy in front of it)"
                )
            },
        )),
        _ => Ok(()),
    }
}
