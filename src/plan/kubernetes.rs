//! Checks of a `kind: kubernetes` target (`target.kubernetes`): names the API accepts,
//! a selector haq can also match itself, one gateway, and the allow-lists — a context
//! or namespace outside them is refused before anything starts. [`validate`] is pure
//! (it is part of the plan `haq check` rebuilds); [`check_context`] reads the
//! kubeconfig's current context (a file, no network) when the scenario names none.

use crate::scenario::{IN_CLUSTER, Issue, KubeTarget, Replicas, Target};

const FIELD: &str = "target.kubernetes";

/// One requirement of an equality-based label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    /// `true` for `=` / `==`, `false` for `!=`.
    pub equal: bool,
    pub value: String,
}

/// Parses `k=v,k2!=v2` (equality-based requirements only: what haq can match against
/// a pod's labels itself, the blast-radius guard).
pub fn parse_selector(s: &str) -> Result<Vec<Requirement>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (key, equal, value) = if let Some((k, v)) = part.split_once("!=") {
            (k, false, v)
        } else if let Some((k, v)) = part.split_once("==") {
            (k, true, v)
        } else if let Some((k, v)) = part.split_once('=') {
            (k, true, v)
        } else {
            return Err(format!(
                "`{part}` is not `key=value` or `key!=value` (set-based selectors are not supported)"
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        if !label_key_ok(key) {
            return Err(format!("`{key}` is not a label key"));
        }
        if !label_value_ok(value) {
            return Err(format!("`{value}` is not a label value"));
        }
        out.push(Requirement {
            key: key.into(),
            equal,
            value: value.into(),
        });
    }
    if !out.iter().any(|r| r.equal) {
        return Err(
            "needs at least one `key=value` (a selector of `!=` only selects nearly every pod)"
                .into(),
        );
    }
    Ok(out)
}

/// The pod's labels satisfy every requirement.
pub fn selector_matches(
    reqs: &[Requirement],
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    reqs.iter()
        .all(|r| (labels.get(&r.key) == Some(&r.value)) == r.equal)
}

/// A DNS-1123 label: what a namespace, Service or container is named.
pub fn dns_label_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: what a pod or node is named.
pub fn dns_subdomain_ok(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(dns_label_ok)
}

fn label_value_ok(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && (v.is_empty()
            || (v.as_bytes()[0].is_ascii_alphanumeric()
                && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric()))
}

fn label_key_ok(k: &str) -> bool {
    let name = match k.rsplit_once('/') {
        Some((prefix, name)) => {
            if !dns_subdomain_ok(prefix) {
                return false;
            }
            name
        }
        None => k,
    };
    !name.is_empty() && label_value_ok(name)
}

/// `target` of `kind: kubernetes`: its `kubernetes` block, its replicas (a count or
/// pod names), no `url` of its own.
pub fn validate(t: &Target) -> Result<(), Issue> {
    let k = t.kubernetes.as_ref().ok_or_else(|| {
        Issue::missing(
            FIELD,
            "is required with `kind: kubernetes` (context allow-list, namespace, selector, gateway)",
        )
    })?;
    if let Some(u) = &t.url {
        return Err(Issue::new(
            "target.url",
            u,
            "is not used with `kind: kubernetes`: give `target.kubernetes.gateway.url` (or `.service`)",
        ));
    }
    match &t.replicas {
        None => {
            return Err(Issue::missing(
                "target.replicas",
                "is required with `kind: kubernetes`: how many serving pods the selector must find, or their pod names",
            ));
        }
        Some(Replicas::Count(n)) if *n == 0 || *n > crate::plan::MAX_SIM_REPLICAS => {
            return Err(Issue::new(
                "target.replicas",
                n,
                format!("must be between 1 and {}", crate::plan::MAX_SIM_REPLICAS),
            ));
        }
        _ => {}
    }
    allow_lists(k)?;
    names(k)?;
    gateway(k)
}

/// A kubernetes fault's `restart`: only with `target.kubernetes.replacement: scale`
/// (the controller otherwise replaces the pod at once), where it is the scale back up;
/// nothing is run or cold-started by haq, so `command` and `cold_start` are refused.
pub fn restart(
    s: &crate::scenario::Scenario,
    field: &str,
    r: &crate::scenario::Restart,
    _action: crate::scenario::FaultAction,
) -> Result<(), Issue> {
    let scale = s
        .target
        .kubernetes
        .as_ref()
        .is_some_and(|k| k.replacement == crate::scenario::KubeReplacement::Scale);
    if !scale {
        return Err(Issue::missing(
            format!("{field}.restart"),
            "a kubernetes target's controller replaces the pod itself; set `target.kubernetes.replacement: scale` to replace it by scaling down and up (docs/kubernetes.md)",
        ));
    }
    if r.command.is_some() || r.cold_start.is_some() {
        return Err(Issue::missing(
            format!("{field}.restart"),
            "with `replacement: scale` the replacement is the workload scaled back up: `command` and `cold_start` are not used",
        ));
    }
    Ok(())
}

/// `target.kubernetes.proxies`: each key a declared replica, each address `IP:PORT`
/// with a fixed port of its own; the replica's declaration gets it as its `listen`
/// (haq's proxy in front of it: probe points and the proxy's evidence).
pub fn proxies(k: &KubeTarget, decls: &mut [crate::scenario::ReplicaDecl]) -> Result<(), Issue> {
    let mut taken = std::collections::BTreeSet::new();
    for (replica, addr) in &k.proxies {
        let field = format!("{FIELD}.proxies.{replica}");
        let Some(d) = decls.iter_mut().find(|d| &d.name == replica) else {
            let names: Vec<&str> = decls.iter().map(|d| d.name.as_str()).collect();
            return Err(Issue::new(
                field,
                replica,
                format!("is not a declared replica ({})", names.join(", ")),
            ));
        };
        let a: std::net::SocketAddr = addr.parse().map_err(|_| {
            Issue::new(
                &field,
                addr,
                "must be `IP:PORT` where haq's proxy listens for this replica, e.g. 0.0.0.0:9001",
            )
        })?;
        if a.port() == 0 || !taken.insert(a.port()) {
            return Err(Issue::new(
                &field,
                addr,
                "needs a fixed port of its own (the replica's Service points at it)",
            ));
        }
        d.listen = Some(addr.clone());
    }
    Ok(())
}

/// The allow-lists are given, and the named context and namespace are in them.
fn allow_lists(k: &KubeTarget) -> Result<(), Issue> {
    if k.allowed_contexts.is_empty() || k.allowed_contexts.iter().any(|c| c.trim().is_empty()) {
        return Err(Issue::missing(
            format!("{FIELD}.allowed_contexts"),
            "must list the kubeconfig contexts haq may act in (nothing happens in any other)",
        ));
    }
    if let Some(c) = &k.context {
        context_allowed(k, c, &format!("{FIELD}.context"))?;
    }
    if !dns_label_ok(&k.namespace) {
        return Err(Issue::new(
            format!("{FIELD}.namespace"),
            &k.namespace,
            "is not a namespace name (lower-case letters, digits and `-`)",
        ));
    }
    if k.allowed_namespaces.is_empty() {
        return Err(Issue::missing(
            format!("{FIELD}.allowed_namespaces"),
            "must list the namespaces haq may act in",
        ));
    }
    if !k.allowed_namespaces.contains(&k.namespace) {
        return Err(Issue::new(
            format!("{FIELD}.namespace"),
            &k.namespace,
            format!(
                "is not in allowed_namespaces ({}): refused",
                k.allowed_namespaces.join(", ")
            ),
        ));
    }
    Ok(())
}

fn context_allowed(k: &KubeTarget, c: &str, field: &str) -> Result<(), Issue> {
    if k.allowed_contexts.iter().any(|a| a == c) {
        return Ok(());
    }
    Err(Issue::new(
        field,
        c,
        format!(
            "is not in target.kubernetes.allowed_contexts ({}): refused",
            k.allowed_contexts.join(", ")
        ),
    ))
}

/// The selector, container, port, readiness path and serving Service.
fn names(k: &KubeTarget) -> Result<(), Issue> {
    parse_selector(&k.selector)
        .map_err(|why| Issue::new(format!("{FIELD}.selector"), &k.selector, why))?;
    if let Some(c) = &k.container
        && !dns_label_ok(c)
    {
        return Err(Issue::new(
            format!("{FIELD}.container"),
            c,
            "is not a container name",
        ));
    }
    if k.port == Some(0) {
        return Err(Issue::new(
            format!("{FIELD}.port"),
            0,
            "must be a port (1-65535)",
        ));
    }
    if !k.ready_path.starts_with('/') {
        return Err(Issue::new(
            format!("{FIELD}.ready_path"),
            &k.ready_path,
            "must start with `/`",
        ));
    }
    if let Some(m) = &k.metrics {
        if !m.path.starts_with('/') {
            return Err(Issue::new(
                format!("{FIELD}.metrics.path"),
                &m.path,
                "must start with `/`",
            ));
        }
        if m.port == Some(0) {
            return Err(Issue::new(
                format!("{FIELD}.metrics.port"),
                0,
                "must be a port (1-65535)",
            ));
        }
    }
    if let Some(s) = &k.serving_service
        && !dns_label_ok(s)
    {
        return Err(Issue::new(
            format!("{FIELD}.serving_service"),
            s,
            "is not a Service name",
        ));
    }
    Ok(())
}

/// Exactly one of `gateway.url` or `gateway.service`.
fn gateway(k: &KubeTarget) -> Result<(), Issue> {
    let g = &k.gateway;
    let f = format!("{FIELD}.gateway");
    match (&g.url, &g.service) {
        (Some(u), None) => {
            let parsed = reqwest::Url::parse(u)
                .map_err(|e| Issue::new(format!("{f}.url"), u, format!("is not a URL: {e}")))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(Issue::new(
                    format!("{f}.url"),
                    u,
                    "must be http:// or https://",
                ));
            }
            if g.port.is_some() || g.path.is_some() {
                return Err(Issue::missing(
                    format!("{f}.port"),
                    "`port` and `path` go with `service`; a `url` carries its own",
                ));
            }
            Ok(())
        }
        (None, Some(s)) => {
            if !dns_label_ok(s) {
                return Err(Issue::new(
                    format!("{f}.service"),
                    s,
                    "is not a Service name",
                ));
            }
            if g.port == Some(0) {
                return Err(Issue::new(format!("{f}.port"), 0, "must be a port"));
            }
            if let Some(p) = &g.path
                && !p.starts_with('/')
            {
                return Err(Issue::new(format!("{f}.path"), p, "must start with `/`"));
            }
            Ok(())
        }
        _ => Err(Issue::missing(
            f,
            "needs exactly one of `url` or `service` (the gateway the load goes to)",
        )),
    }
}

/// Where the context haq would act in comes from, read without network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextSource {
    /// The kubeconfig's `current-context`.
    Current(String),
    /// No kubeconfig, in a pod: the service account's (`in-cluster`).
    InCluster,
    /// Neither.
    None(String),
}

impl ContextSource {
    /// Reads `KUBECONFIG` (or `~/.kube/config`); in a pod without one, the in-cluster
    /// configuration. No network: exec credential plugins run only when a client is
    /// built.
    pub fn read() -> ContextSource {
        match kube::config::Kubeconfig::read() {
            Ok(kc) => match kc.current_context {
                Some(c) if !c.is_empty() => ContextSource::Current(c),
                _ => ContextSource::None("the kubeconfig names no current-context".into()),
            },
            Err(_) if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => {
                ContextSource::InCluster
            }
            Err(e) => ContextSource::None(format!("no kubeconfig could be read ({e})")),
        }
    }
}

/// The context haq acts in: the scenario's, or the one `source` gives, inside the
/// allow-list. The error names `target.kubernetes.allowed_contexts` (exit 2).
pub fn check_context(k: &KubeTarget, source: &ContextSource) -> Result<String, Issue> {
    if let Some(c) = &k.context {
        context_allowed(k, c, &format!("{FIELD}.context"))?;
        return Ok(c.clone());
    }
    let c = match source {
        ContextSource::Current(c) => c.clone(),
        ContextSource::InCluster => IN_CLUSTER.to_string(),
        ContextSource::None(why) => {
            return Err(Issue::missing(
                format!("{FIELD}.context"),
                format!("is not given and {why}: name the context"),
            ));
        }
    };
    if k.allowed_contexts.contains(&c) {
        return Ok(c);
    }
    Err(Issue::new(
        format!("{FIELD}.allowed_contexts"),
        &c,
        format!(
            "does not list the kubeconfig's current context `{c}` (allowed: {}): refused — switch context or set target.kubernetes.context",
            k.allowed_contexts.join(", ")
        ),
    ))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::Path;

    use super::*;
    use crate::plan::{Plan, load_str};
    use crate::scenario::{ScenarioError, parse_str};

    /// A kubernetes scenario naming its context (no kubeconfig is read).
    pub(crate) fn kube_scenario() -> String {
        crate::plan::tests::GOOD
            .replace(
                "target: {kind: sim, replicas: 3}",
                "target:
  kind: kubernetes
  replicas: 3
  kubernetes:
    context: kind-haq
    allowed_contexts: [kind-haq]
    namespace: llm
    allowed_namespaces: [llm]
    selector: app=llama
    gateway: {service: gateway, port: 8080}
    serving_service: llama",
            )
            .replace(
                "  - target: {replica: w2}",
                "  - backend: kubernetes\n    target: {replica: w2}",
            )
    }

    fn load(text: &str, sets: &[&str]) -> Result<Plan, ScenarioError> {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        load_str(text, "k.yaml", Path::new("."), &sets, None)
    }

    fn err(text: &str, sets: &[&str]) -> String {
        match load(text, sets) {
            Ok(_) => panic!("expected an error for {sets:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_kubernetes_scenario_becomes_a_plan() {
        let p = load(&kube_scenario(), &[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.replicas, vec!["w1", "w2", "w3"]);
        assert_eq!(p.faults[0].name, "kill-w2");
        let k = p.scenario.target.kubernetes.as_ref().expect("block");
        assert_eq!(k.gateway_url(), "http://gateway.llm.svc:8080/v1");
    }

    /// A context or namespace outside the allow-lists is refused at its line and column.
    #[test]
    fn a_context_or_namespace_outside_the_allow_list_is_refused_where_it_is_written() {
        let text = kube_scenario().replace("context: kind-haq", "context: prod");
        let e = err(&text, &[]);
        assert!(
            e.starts_with("k.yaml:6:14: `target.kubernetes.context`"),
            "{e}"
        );
        assert!(
            e.contains("not in target.kubernetes.allowed_contexts (kind-haq)"),
            "{e}"
        );
        let text = kube_scenario().replace(
            "allowed_namespaces: [llm]",
            "allowed_namespaces: [llm, llm-canary]",
        );
        let e = err(&text, &["target.kubernetes.namespace=prod"]);
        assert!(
            e.starts_with("--set target.kubernetes.namespace=prod: `target.kubernetes.namespace`"),
            "{e}"
        );
        assert!(
            e.contains("not in allowed_namespaces (llm, llm-canary)"),
            "{e}"
        );
        let e = err(&kube_scenario(), &["target.kubernetes.allowed_contexts=[]"]);
        assert!(e.contains("allowed_contexts`: must list"), "{e}");
        let text = kube_scenario().replace(
            "allowed_namespaces: [llm]",
            "allowed_namespaces: [llm-canary]",
        );
        let e = err(&text, &[]);
        assert!(
            e.starts_with("k.yaml:8:16: `target.kubernetes.namespace`"),
            "{e}"
        );
    }

    #[test]
    fn the_current_context_is_checked_against_the_allow_list() {
        let parsed =
            parse_str(&kube_scenario(), "k.yaml", Path::new("."), &[], None).expect("parses");
        let mut k = parsed.scenario.target.kubernetes.expect("block");
        // Named in the scenario: the kubeconfig is not consulted.
        let any = ContextSource::None("unread".into());
        assert_eq!(check_context(&k, &any).expect("named"), "kind-haq");
        k.context = None;
        let cur = |c: &str| ContextSource::Current(c.into());
        assert_eq!(
            check_context(&k, &cur("kind-haq")).expect("allowed"),
            "kind-haq"
        );
        let e = check_context(&k, &cur("prod-eu")).expect_err("refused");
        assert_eq!(e.field, "target.kubernetes.allowed_contexts");
        assert!(e.reason.contains("current context `prod-eu`"), "{e:?}");
        let e = check_context(&k, &ContextSource::InCluster).expect_err("not listed");
        assert_eq!(e.value.as_deref(), Some(IN_CLUSTER));
        k.allowed_contexts.push(IN_CLUSTER.into());
        assert_eq!(
            check_context(&k, &ContextSource::InCluster).expect("listed"),
            IN_CLUSTER
        );
        let e = check_context(&k, &any).expect_err("nothing to read");
        assert_eq!(e.field, "target.kubernetes.context");
    }

    #[test]
    fn bad_kubernetes_fields_are_refused() {
        let cases: &[(&[&str], &str)] = &[
            (&["target.replicas=null"], "`target.replicas`: is required"),
            (&["target.kubernetes.selector=app in (a)"], "set-based"),
            (
                &["target.kubernetes.selector=tier!=canary"],
                "at least one `key=value`",
            ),
            (&["target.kubernetes.namespace=LLM"], "not a namespace name"),
            (
                &["target.kubernetes.gateway={}"],
                "exactly one of `url` or `service`",
            ),
            (
                &["target.kubernetes.gateway={url: ftp://x}"],
                "http:// or https://",
            ),
            (
                &["target.kubernetes.ready_path=health"],
                "must start with `/`",
            ),
            (
                &["target.url=http://x/v1"],
                "is not used with `kind: kubernetes`",
            ),
            (&["target.replicas=[{name: Pod_1}]"], "not a pod name"),
            (
                &["target.replicas=[{name: p1, node: n1}]"],
                "gives only its pod `name`",
            ),
            (&["faults[0].backend=process"], "use `backend: kubernetes`"),
            (
                &["faults[0].target={node: n1}", "faults[0].domain=node"],
                "name a replica",
            ),
            (
                &["faults[0].domain=process"],
                "`faults[0].exec`: is required",
            ),
            (
                &["faults[0].exec=[kill]"],
                "only for `backend: kubernetes` faults that exec in the pod",
            ),
            (&["faults[0].action=drain"], "declare `domain: drain`"),
            (
                &["faults[0].domain=network", "faults[0].action=kill"],
                "blackhole",
            ),
            (&["faults[0].restart={}"], "replaces the pod itself"),
            (
                &["faults[0].domain=drain", "faults[0].grace=pod"],
                "`faults[0].grace`: is only for a `worker` kill",
            ),
            (
                &["target.kubernetes.replacement=scale", "faults[0].grace=5"],
                "not with `replacement: scale`",
            ),
            (&["faults[0].grace=soon"], "`faults[0].grace`"),
            (
                &["target.kubernetes.metrics={path: metrics}"],
                "`target.kubernetes.metrics.path`: must start with `/`",
            ),
            (
                &["target.kubernetes.metrics={port: 0}"],
                "`target.kubernetes.metrics.port`",
            ),
            (
                &["faults[0].reset_connections=proxy"],
                "is only for `backend: kubernetes` blackholes of domain `network`",
            ),
            (
                &[
                    "faults[0].domain=network",
                    "faults[0].reset_connections=proxy",
                ],
                "needs haq's proxy in front of replica `w2`: give its address in target.kubernetes.proxies",
            ),
            (
                &[
                    "faults[0].domain=network",
                    "faults[0].reset_connections={exec: []}",
                ],
                "`faults[0].reset_connections.exec`: is empty",
            ),
        ];
        for (sets, want) in cases {
            let e = err(&kube_scenario(), sets);
            assert!(e.contains(want), "{sets:?}: {e}");
        }
        // The other kinds refuse the block and the backend.
        let sim = kube_scenario().replace("kind: kubernetes", "kind: sim");
        assert!(err(&sim, &[]).contains("only used with `kind: kubernetes`"));
    }

    #[test]
    fn a_restart_is_the_scale_back_up_of_replacement_scale() {
        let scale = "target.kubernetes.replacement=scale";
        let p = load(&kube_scenario(), &[scale, "faults[0].restart={after: 5s}"]).expect("plan");
        assert!(p.faults[0].restart.is_some());
        let e = err(&kube_scenario(), &[scale, "faults[0].restart={command: x}"]);
        assert!(e.contains("`command` and `cold_start` are not used"), "{e}");
        let e = err(&kube_scenario(), &["faults[0].restart={after: 5s}"]);
        assert!(e.contains("replacement: scale"), "{e}");
    }

    /// The fault of [`kube_scenario`] with `action` and `exec` written out (line 26).
    fn exec_fault(domain: &str, action: &str, exec: &str) -> String {
        kube_scenario().replace(
            "  - backend: kubernetes\n",
            &format!(
                "  - backend: kubernetes\n    domain: {domain}\n    action: {action}\n    exec: {exec}\n"
            ),
        )
    }

    const FREEZE: &str = "{inject: [pkill, -STOP, -f, EngineCore], verify: [pgrep, -r, T, -f, EngineCore], heal: [pkill, -CONT, -f, EngineCore]}";

    /// Exec faults (`freeze`, `gpu_lost`, `slow`, a `kill` with a verify of its own)
    /// become plans with their commands.
    #[test]
    fn exec_faults_become_plans_with_their_commands() {
        let p = load(
            &exec_fault("gpu", "freeze", FREEZE),
            &["faults[0].duration=5s"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = p.faults[0].exec.clone().expect("exec");
        assert_eq!(e.inject, ["pkill", "-STOP", "-f", "EngineCore"]);
        assert_eq!(
            e.heal.as_deref(),
            Some(&["pkill", "-CONT", "-f", "EngineCore"].map(String::from)[..])
        );
        assert_eq!(
            (e.container, e.timeout),
            (None, crate::wire::units::Dur::secs(30))
        );
        assert!(p.faults[0].healed());
        // A kill command alone is an inject; a gpu_lost with none heals nothing.
        let p = load(
            &exec_fault("gpu", "gpu_lost", "[pkill, -KILL, -f, EngineCore]"),
            &[],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let e = p.faults[0].exec.clone().expect("exec");
        assert_eq!((e.inject.len(), e.verify, e.heal), (4, None, None));
        assert!(!p.faults[0].healed());
        for (domain, action, exec) in [
            (
                "network",
                "slow",
                "{inject: [tc, qdisc, add, dev, eth0, root, netem, delay, 200ms], verify: [sh, -c, 'tc qdisc show dev eth0 | grep -q netem'], heal: [tc, qdisc, del, dev, eth0, root], container: net, timeout: 10s}",
            ),
            ("worker", "slow", "{inject: [a], verify: [b], heal: [c]}"),
            (
                "process",
                "kill",
                "{inject: [pkill, -KILL, -f, vllm], verify: [sh, -c, '! pgrep -f vllm']}",
            ),
            ("gpu", "gpu_lost", "{inject: [a], heal: [b]}"),
        ] {
            let p = load(&exec_fault(domain, action, exec), &[])
                .unwrap_or_else(|e| panic!("{action}: {e}"));
            assert!(p.faults[0].exec.is_some(), "{action}");
        }
    }

    /// What an exec fault lacks or has too much of is refused where it is written.
    #[test]
    fn exec_faults_are_refused_where_written() {
        let cases: [(&str, &str, &str, &[&str], &str); 11] = [
            (
                "gpu",
                "freeze",
                "[pkill, -STOP, -f, EngineCore]",
                &[],
                "k.yaml:27:11: `faults[0].exec`: is required for `freeze`",
            ),
            (
                "gpu",
                "freeze",
                "{inject: [pkill, -STOP, x], heal: [pkill, -CONT, x]}",
                &[],
                "`faults[0].exec.verify`: is required: how haq proves",
            ),
            (
                "gpu",
                "slow",
                "{inject: [a], verify: [b]}",
                &[],
                "`faults[0].exec.heal`: is required for `slow`",
            ),
            (
                "gpu",
                "kill",
                "{inject: [a], heal: [b]}",
                &[],
                "`faults[0].exec.heal`: is not for a kill",
            ),
            (
                "gpu",
                "gpu_lost",
                "[a]",
                &["faults[0].duration=5s"],
                "`faults[0].exec`: is required with `duration`",
            ),
            (
                "gpu",
                "freeze",
                "{inject: [], verify: [b], heal: [c]}",
                &[],
                "`faults[0].exec.inject`: is empty",
            ),
            (
                "gpu",
                "freeze",
                "{inject: [a], verify: [b], heal: [c], container: Net}",
                &[],
                "k.yaml:27:60: `faults[0].exec.container`: is not a container name (value: Net)",
            ),
            (
                "gpu",
                "freeze",
                "{inject: [a], verify: [b], heal: [c], timeout: 0s}",
                &[],
                "`faults[0].exec.timeout`: must be greater than 0",
            ),
            (
                "node",
                "freeze",
                FREEZE,
                &[],
                "`faults[0].domain`: an exec fault hits one pod's container",
            ),
            (
                "gpu",
                "slow",
                FREEZE,
                &["faults[0].factor=2"],
                "`faults[0].factor`: is only for the engine backend's `slow`",
            ),
            (
                "gpu",
                "gpu_hang",
                FREEZE,
                &[],
                "on kubernetes a hung engine is `action: freeze` with `exec`",
            ),
        ];
        for (domain, action, exec, sets, want) in cases {
            let e = err(&exec_fault(domain, action, exec), sets);
            assert!(e.contains(want), "{action} {exec}: {e}");
        }
        // An exec on a fault that execs nothing; a freeze with no exec at all.
        let e = err(&kube_scenario(), &["faults[0].exec={inject: [a]}"]);
        assert!(
            e.contains("only for `backend: kubernetes` faults that exec in the pod"),
            "{e}"
        );
        let e = err(
            &kube_scenario(),
            &["faults[0].action=freeze", "faults[0].domain=gpu"],
        );
        assert!(
            e.contains("`faults[0].exec`: is required for a kubernetes `freeze`"),
            "{e}"
        );
        let e = err(
            &kube_scenario(),
            &["faults[0].exec={inject: [a], bogus: 1}"],
        );
        assert!(e.contains("a command (a list: the kill of a `kill` fault) or {inject, verify, heal, container, timeout}"), "{e}");
    }

    #[test]
    fn every_kubernetes_fault_domain_validates() {
        for sets in [
            &["faults[0].domain=drain"][..],
            &["faults[0].domain=node"],
            &["faults[0].domain=node", "faults[0].action=drain"],
            &["faults[0].domain=network", "faults[0].duration=2s"],
            &["faults[0].grace=pod"],
            &["target.kubernetes.metrics={}"],
            &["faults[0].grace=30"],
            &[
                "faults[0].domain=network",
                "faults[0].reset_connections={exec: [ss, -K, dst, 10.0.0.9]}",
            ],
            &[
                "faults[0].domain=network",
                "faults[0].reset_connections=proxy",
                "target.kubernetes.proxies={w2: \"0.0.0.0:9002\"}",
            ],
            &[
                "faults[0].domain=gpu",
                "faults[0].exec=[pkill, -KILL, llama-server]",
            ],
        ] {
            let p = load(&kube_scenario(), sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
            assert_eq!(p.faults[0].replicas, vec!["w2"], "{sets:?}");
        }
    }

    /// `target.kubernetes.proxies` puts haq's proxy in front of the replicas it names
    /// (their `listen`): probe points and the proxy backend need it, and a bad entry is
    /// refused where it is written.
    #[test]
    fn proxies_are_checked_where_written_and_enable_probe_points() {
        let with = |entries: &str| {
            kube_scenario().replace(
                "    serving_service: llama",
                &format!("    serving_service: llama\n    proxies:\n{entries}"),
            )
        };
        let all = "      w1: 0.0.0.0:9001\n      w2: 0.0.0.0:9002\n      w3: 0.0.0.0:9003\n";
        let probe = ["faults[0].when={probe: first_delta}"];
        let p = load(&with(all), &probe).unwrap_or_else(|e| panic!("{e}"));
        let listen: Vec<Option<&str>> = p
            .replica_decls
            .iter()
            .map(|d| d.listen.as_deref())
            .collect();
        assert_eq!(
            listen,
            [
                Some("0.0.0.0:9001"),
                Some("0.0.0.0:9002"),
                Some("0.0.0.0:9003")
            ]
        );
        let e = err(&kube_scenario(), &probe);
        assert!(
            e.contains("replica `w1` has no address in target.kubernetes.proxies"),
            "{e}"
        );
        let line = |text: &str, key: &str| {
            text.lines()
                .position(|l| l.trim_start().starts_with(key))
                .expect("line")
                + 1
        };
        for (entries, key, want) in [
            (
                "      w4: 0.0.0.0:9004\n",
                "w4:",
                "is not a declared replica (w1, w2, w3)",
            ),
            ("      w2: localhost:9002\n", "w2:", "must be `IP:PORT`"),
            (
                "      w1: 0.0.0.0:9001\n      w2: 127.0.0.1:9001\n",
                "w2:",
                "a fixed port of its own",
            ),
        ] {
            let text = with(entries);
            let e = err(&text, &[]);
            let at = format!("k.yaml:{}:", line(&text, key));
            assert!(e.starts_with(&at), "{e}");
            assert!(
                e.contains(&format!("`target.kubernetes.proxies.{}`", &key[..2])),
                "{e}"
            );
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn selectors_match_labels_as_the_api_server_does() {
        let r = parse_selector("app=llama, tier!=canary").expect("parses");
        let labels = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(selector_matches(&r, &labels(&[("app", "llama")])));
        assert!(!selector_matches(
            &r,
            &labels(&[("app", "llama"), ("tier", "canary")])
        ));
        assert!(!selector_matches(&r, &labels(&[("app", "vllm")])));
        assert!(parse_selector("example.com/app=x").is_ok());
        assert!(parse_selector("app=").is_ok());
        assert!(parse_selector("=x").is_err());
    }
}
