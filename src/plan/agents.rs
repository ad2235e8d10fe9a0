//! Checks of `agents.kubernetes` (docs/agents.md): the Job goes in the target's
//! cluster and namespace (so `target.kind: kubernetes`, its allow-lists guarding both),
//! names the API accepts, an address to serve the agents on, and credentials the agent
//! pods can read. Pure.

use super::kubernetes::dns_subdomain_ok;
use crate::scenario::{HeaderSource, Issue, KubeAgents, Scenario, TargetKind};

const FIELD: &str = "agents.kubernetes";

/// The shortest start deadline: a pod is scheduled, started and reads its scenario in
/// a few seconds on an idle cluster with the image present.
const MIN_START_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

pub fn validate(s: &Scenario) -> Result<(), Issue> {
    let Some(k) = &s.agents.kubernetes else {
        return Ok(());
    };
    if s.target.kind != TargetKind::Kubernetes {
        return Err(Issue::new(
            FIELD,
            "set",
            "needs `target.kind: kubernetes`: the agents' Job is created in the target's context and namespace, which its allow-lists guard",
        ));
    }
    names(k)?;
    if !matches!(
        k.image_pull_policy.as_str(),
        "IfNotPresent" | "Always" | "Never"
    ) {
        return Err(Issue::new(
            format!("{FIELD}.image_pull_policy"),
            &k.image_pull_policy,
            "is not `IfNotPresent`, `Always` or `Never`",
        ));
    }
    if !k.scenario_dir.starts_with('/') {
        return Err(Issue::new(
            format!("{FIELD}.scenario_dir"),
            &k.scenario_dir,
            "is not an absolute path",
        ));
    }
    if k.listen.parse::<std::net::SocketAddr>().is_err() {
        return Err(Issue::new(
            format!("{FIELD}.listen"),
            &k.listen,
            "is not an address and port (`0.0.0.0:7070`)",
        ));
    }
    if let Some(a) = &k.advertise
        && !a.starts_with("http://")
    {
        return Err(Issue::new(
            format!("{FIELD}.advertise"),
            a,
            "is not an `http://` URL",
        ));
    }
    if k.start_within.0 < MIN_START_WITHIN {
        return Err(Issue::new(
            format!("{FIELD}.start_within"),
            crate::wire::units::format_duration(k.start_within.0),
            "is shorter than 2s: no pod is scheduled and started that fast",
        ));
    }
    files(s)
}

fn names(k: &KubeAgents) -> Result<(), Issue> {
    if k.image.trim().is_empty() {
        return Err(Issue::missing(
            format!("{FIELD}.image"),
            "is empty: name haq's image",
        ));
    }
    if !dns_subdomain_ok(&k.scenario_config_map) {
        return Err(Issue::new(
            format!("{FIELD}.scenario_config_map"),
            &k.scenario_config_map,
            "is not a ConfigMap name",
        ));
    }
    if let Some(x) = &k.env_secret
        && !dns_subdomain_ok(x)
    {
        return Err(Issue::new(
            format!("{FIELD}.env_secret"),
            x,
            "is not a Secret name",
        ));
    }
    Ok(())
}

/// A header read from a file: the agent pods have no such file.
fn files(s: &Scenario) -> Result<(), Issue> {
    for (name, h) in &s.target.headers {
        if let HeaderSource::File { file, .. } = h {
            return Err(Issue::new(
                format!("target.headers.{name}"),
                file,
                "is read from a file, which the agent pods of `agents.kubernetes` do not have: read it from an environment variable (`env:`) and give the agents the Secret holding it (`agents.kubernetes.env_secret`)",
            ));
        }
    }
    Ok(())
}
