//! The declared replicas (`target.replicas`, the list form): unique names, and for
//! `kind: url` an upstream, a fixed proxy `listen` port and a process haq may signal.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use crate::scenario::{Issue, ProcessDecl, ReplicaDecl, Replicas, Target, TargetKind};

/// A name of a replica or a fault: letters, digits, `-`, `_` and `.`.
pub(super) fn name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Checks `target.replicas` (the list form) and returns the resolved declarations.
pub fn validate_replicas(t: &Target) -> Result<Vec<ReplicaDecl>, Issue> {
    let mut decls = t.replica_decls();
    if let Some(k) = t
        .kubernetes
        .as_ref()
        .filter(|_| t.kind == TargetKind::Kubernetes)
    {
        crate::plan::kubernetes::proxies(k, &mut decls)?;
    }
    let Some(Replicas::List(list)) = &t.replicas else {
        return Ok(decls);
    };
    let mut names = BTreeSet::new();
    let mut listens = BTreeSet::new();
    for (i, r) in list.iter().enumerate() {
        let f = format!("target.replicas[{i}]");
        if !name_ok(&r.name) || !names.insert(r.name.as_str()) {
            return Err(Issue::new(
                format!("{f}.name"),
                format!("{:?}", r.name),
                "replica names must be unique and use only letters, digits, `-`, `_` and `.`",
            ));
        }
        if t.kind == TargetKind::Sim {
            sim_replica(&f, r)?;
        } else if t.kind == TargetKind::Kubernetes {
            kube_replica(&f, r)?;
        } else {
            url_replica(&f, r, &mut listens)?;
        }
    }
    Ok(decls)
}

/// A sim replica gives only `name` and `node`: the sim starts its own workers.
fn sim_replica(f: &str, r: &ReplicaDecl) -> Result<(), Issue> {
    for (field, set) in [
        ("upstream", r.upstream.is_some()),
        ("listen", r.listen.is_some()),
        ("process", r.process.is_some()),
    ] {
        if set {
            return Err(Issue::missing(
                format!("{f}.{field}"),
                "is for `kind: url` replicas; the sim starts its own workers (give only `name` and `node`)",
            ));
        }
    }
    Ok(())
}

/// A kubernetes replica is a pod's name: everything else is discovered.
fn kube_replica(f: &str, r: &ReplicaDecl) -> Result<(), Issue> {
    if !crate::plan::kubernetes::dns_subdomain_ok(&r.name) {
        return Err(Issue::new(
            format!("{f}.name"),
            &r.name,
            "is not a pod name",
        ));
    }
    if r.upstream.is_some() || r.listen.is_some() || r.process.is_some() || r.node.is_some() {
        return Err(Issue::missing(
            f,
            "a kubernetes replica gives only its pod `name`: its node, address and container are discovered",
        ));
    }
    Ok(())
}

/// A `kind: url` replica: its `host:port`, its proxy's own fixed port (`listens`
/// holds the ports taken so far) and its process.
fn url_replica(f: &str, r: &ReplicaDecl, listens: &mut BTreeSet<SocketAddr>) -> Result<(), Issue> {
    let up = r.upstream.as_deref().ok_or_else(|| {
        Issue::missing(
            format!("{f}.upstream"),
            "is required: the `host:port` this replica serves on",
        )
    })?;
    match up.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {}
        _ => {
            return Err(Issue::new(
                format!("{f}.upstream"),
                up,
                "must be `host:port` (no scheme, no path)",
            ));
        }
    }
    if let Some(l) = &r.listen {
        let a: SocketAddr = l.parse().map_err(|_| {
            Issue::new(
                format!("{f}.listen"),
                l,
                "must be `IP:PORT`, e.g. 127.0.0.1:9101",
            )
        })?;
        if a.port() == 0 || !listens.insert(a) {
            return Err(Issue::new(
                format!("{f}.listen"),
                l,
                "needs a fixed port of its own (the gateway is pointed at it)",
            ));
        }
    }
    match &r.process {
        Some(p) => process(f, p),
        None => Ok(()),
    }
}

/// `process`: one of `pid` or `pid_file`, a pid haq may signal, a readiness path.
fn process(f: &str, p: &ProcessDecl) -> Result<(), Issue> {
    if p.pid.is_some() == p.pid_file.is_some() {
        return Err(Issue::missing(
            format!("{f}.process"),
            "needs exactly one of `pid` or `pid_file`",
        ));
    }
    if p.pid.is_some_and(|p| p <= 1) {
        return Err(Issue::new(
            format!("{f}.process.pid"),
            p.pid.unwrap_or(0),
            "is not a process haq may signal",
        ));
    }
    if !p.ready_path.starts_with('/') {
        return Err(Issue::new(
            format!("{f}.process.ready_path"),
            &p.ready_path,
            "must start with `/`",
        ));
    }
    Ok(())
}
