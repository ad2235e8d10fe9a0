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
