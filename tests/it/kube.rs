//! The kubernetes target as a user runs it, with no cluster: `haq validate` reads the
//! kubeconfig's current context (a file; no network) and refuses one outside the
//! scenario's allow-list. The API calls themselves are tested against kube-rs's mock
//! API server in `src/target/kube` and `src/faults/kube`.

use crate::cli::haq_env;
use crate::support::scratch;

/// A kubeconfig whose current context is `current` (nothing listens at its server).
fn kubeconfig(dir: &std::path::Path, current: &str) -> std::path::PathBuf {
    let p = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {current}\ncontexts:\n- name: {current}\n  context: {{cluster: c, user: u}}\nclusters:\n- name: c\n  cluster: {{server: \"https://127.0.0.1:9\"}}\nusers:\n- name: u\n  user: {{token: t}}\n"
    );
    std::fs::write(&p, text).expect("kubeconfig");
    p
}

fn haq_with(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let kc = kubeconfig.to_str().expect("utf-8 path");
    haq_env(args, &[("KUBECONFIG", kc)], &["KUBERNETES_SERVICE_HOST"])
}

#[test]
fn validate_refuses_a_current_context_outside_the_allow_list() {
    let dir = scratch("kube-validate");
    let scenario = "examples/kubernetes/kill-pod.yaml";
    let (code, out, err) = haq_with(&kubeconfig(&dir, "kind-haq"), &["validate", scenario]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("valid"), "{out}");
    let (code, _, err) = haq_with(&kubeconfig(&dir, "prod-eu"), &["validate", scenario]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("kill-pod.yaml:20:23: `target.kubernetes.allowed_contexts`"),
        "{err}"
    );
    assert!(err.contains("current context `prod-eu`"), "{err}");
    // A namespace switched on the command line is refused the same way.
    let (code, _, err) = haq_with(
        &kubeconfig(&dir, "kind-haq"),
        &[
            "validate",
            scenario,
            "--set",
            "target.kubernetes.namespace=prod",
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("`target.kubernetes.namespace`: is not in allowed_namespaces"),
        "{err}"
    );
}

/// Every example scenario validates, and `haq run --dry-run` prints its API calls,
/// makes none (the kubeconfig's server is never reached, no run directory is made)
/// and exits 0; a target of another kind is refused.
#[test]
fn dry_run_prints_the_api_calls_of_every_example_and_makes_none() {
    let dir = scratch("kube-dry-run");
    let kc = kubeconfig(&dir, "kind-haq");
    let reports = dir.join("reports");
    let reports = reports.to_str().expect("utf-8");
    let mut seen = 0;
    for e in
        std::fs::read_dir(crate::support::root().join("examples/kubernetes")).expect("examples")
    {
        let p = e.expect("entry").path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let Some(text) = std::fs::read_to_string(&p)
            .ok()
            .filter(|t| t.contains("kind: kubernetes"))
        else {
            continue;
        };
        seen += 1;
        let path = p.to_str().expect("utf-8");
        let (code, out, err) = haq_with(&kc, &["run", "--dry-run", path, "--reports-dir", reports]);
        assert_eq!(code, 0, "{path}: {err}");
        let out = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(out.contains("no call is made"), "{path}: {out}");
        assert!(
            out.contains("GET /api/v1/namespaces/haq-demo/pods?&labelSelector=app%3Dllama"),
            "{path}: {out}"
        );
        let want = if text.contains("domain: network") {
            "POST /apis/networking.k8s.io/v1/namespaces/haq-demo/networkpolicies?"
        } else if text.contains("domain: node") {
            "PATCH /api/v1/nodes/NODE_OF_w1? {\"spec\":{\"unschedulable\":true}}"
        } else if text.contains("domain: drain") {
            "POST /api/v1/namespaces/haq-demo/pods/POD_OF_w2/eviction?"
        } else if text.contains("domain: gpu") {
            "/exec?&stdout=true&stderr=true&container=llama&command=pkill"
        } else {
            "DELETE /api/v1/namespaces/haq-demo/pods/POD_OF_w2? {\"gracePeriodSeconds\":0}"
        };
        assert!(out.contains(want), "{path}: wanted {want}\n{out}");
    }
    assert!(seen >= 5, "{seen} kubernetes examples");
    assert!(
        !dir.join("reports").exists(),
        "a dry run writes no run directory"
    );
    let (code, _, err) = haq_with(&kc, &["run", "--dry-run", "scenarios/quickstart.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--dry-run lists the Kubernetes API calls"),
        "{err}"
    );
}
