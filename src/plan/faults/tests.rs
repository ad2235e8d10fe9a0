//! Validation of declared replicas and faults: each bad input is one error naming the
//! field, before anything runs.

use crate::scenario::{FaultAction, ProbePoint, ScenarioError};

use crate::plan::{Plan, Trigger, load_str};

const SIM: &str = "name: t
target: {kind: sim, replicas: 3}
workload:
  mix: {classes: [{name: c, prompt_tokens: 10, output_tokens: 10}]}
protected_load: 1/s
slo: {ttft_p95: 1s, itl_p95: 1s, e2e_p95: 5s}
phases: [{name: fault, duration: 10s}]
faults:
";

const URL: &str = "name: t
target:
  kind: url
  url: http://127.0.0.1:9000/v1
  replicas:
    - {name: a, upstream: 127.0.0.1:8001, listen: 127.0.0.1:9101, node: n1, process: {pid: 4242, restart: run-a}}
    - {name: b, upstream: 127.0.0.1:8002, listen: 127.0.0.1:9102, node: n1, process: {pid_file: /tmp/b.pid}}
    - {name: c, upstream: localhost:8003, node: n2}
workload:
  mix: {classes: [{name: c, prompt_tokens: 10, output_tokens: 10}]}
protected_load: 1/s
slo: {ttft_p95: 1s, itl_p95: 1s, e2e_p95: 5s}
phases: [{name: fault, duration: 10s}]
faults:
";

fn load(base: &str, faults: &str) -> Result<Plan, ScenarioError> {
    let faults = if faults.is_empty() { " []\n" } else { faults };
    load_str(
        &format!("{base}{faults}"),
        "t.yaml",
        std::path::Path::new("."),
        &[],
        None,
    )
}

fn err(base: &str, faults: &str) -> ScenarioError {
    match load(base, faults) {
        Ok(_) => panic!("accepted:\n{faults}"),
        Err(e) => e,
    }
}

#[test]
fn url_replicas_and_their_faults_become_a_plan() {
    let p = load(
        URL,
        "  - {name: k, domain: node, action: kill, target: {node: n1}, at: {phase: fault, offset: 1s}, restart: {command: run-x}}
  - {name: cut, domain: network, backend: proxy, action: blackhole, target: {replica: b}, at: {phase: fault, offset: 2s}, duration: 1s}
  - {name: hot, domain: worker, action: freeze, target: {replica: a}, at: {phase: fault}, when: {in_flight: 4}}
",
    )
    .expect("valid");
    assert_eq!(p.replicas, vec!["a", "b", "c"]);
    assert_eq!(p.faults[0].replicas, vec!["a", "b"]);
    assert_eq!(p.faults[0].node.as_deref(), Some("n1"));
    assert_eq!(p.faults[1].action, FaultAction::Blackhole);
    assert!(matches!(
        p.faults[2].trigger,
        Trigger::InFlight { n: 4, .. }
    ));
}

#[test]
fn probe_faults_may_leave_the_target_to_the_probe() {
    let p = load(
        SIM,
        "  - {at: {phase: fault, offset: 1s}, when: {probe: {computed_not_sent: 2}}}\n",
    )
    .expect("valid");
    assert!(p.faults[0].replicas.is_empty());
    assert_eq!(p.faults[0].name, "kill-probe");
    assert!(matches!(
        p.faults[0].trigger,
        Trigger::Probe {
            point: ProbePoint::ComputedNotSent(2),
            ..
        }
    ));
}

#[test]
fn bad_replica_lists() {
    let e = err(&URL.replace("upstream: 127.0.0.1:8001, ", ""), "");
    assert_eq!(e.field, "target.replicas[0].upstream");
    let e = err(&URL.replace("127.0.0.1:8002", "http://x:8002/v1"), "");
    assert_eq!(e.field, "target.replicas[1].upstream");
    let e = err(&URL.replace("127.0.0.1:9102", "127.0.0.1:9101"), "");
    assert_eq!(e.field, "target.replicas[1].listen");
    let e = err(
        &URL.replace("{pid: 4242, restart: run-a}", "{restart: run-a}"),
        "",
    );
    assert_eq!(e.field, "target.replicas[0].process");
    let e = err(&URL.replace("name: b", "name: a"), "");
    assert_eq!(e.field, "target.replicas[1].name");
    let e = err(
        &SIM.replace("replicas: 3", "replicas: [{name: x, upstream: 'h:1'}]"),
        "",
    );
    assert_eq!(e.field, "target.replicas[0].upstream");
    assert!(e.reason.contains("sim starts its own"), "{e}");
    let e = err(
        &URL.replace("  replicas:\n", "  replicas: 3\n  other:\n"),
        "",
    );
    assert!(
        e.to_string().contains("other") || e.field == "target.replicas",
        "{e}"
    );
}

#[test]
fn every_target_stays_inside_the_declared_replicas() {
    let e = err(URL, "  - {target: {replica: z}, at: {phase: fault}}\n");
    assert_eq!(e.field, "faults[0].target.replica");
    assert!(e.reason.contains("no such replica"), "{e}");
    let e = err(
        URL,
        "  - {domain: node, target: {node: n9}, at: {phase: fault}}\n",
    );
    assert_eq!(e.field, "faults[0].target.node");
    let e = err(URL, "  - {at: {phase: fault}}\n");
    assert_eq!(e.field, "faults[0].target");
}

#[test]
fn backends_must_reach_their_targets() {
    // c has no process and no proxy.
    let e = err(URL, "  - {target: {replica: c}, at: {phase: fault}}\n");
    assert_eq!(e.field, "faults[0].backend");
    assert!(e.reason.contains("process"), "{e}");
    let e = err(
        URL,
        "  - {domain: network, backend: proxy, action: reset, target: {replica: c}, at: {phase: fault}}\n",
    );
    assert!(e.reason.contains("listen"), "{e}");
    let e = err(URL, "  - {at: {phase: fault}, when: {probe: prefill}}\n");
    assert_eq!(e.field, "faults[0].when.probe");
    let e = err(
        URL,
        "  - {target: {replica: c}, at: {phase: fault}, restart: {}}\n",
    );
    assert_eq!(e.field, "faults[0].backend");
    let e = err(
        URL,
        "  - {target: {replica: b}, at: {phase: fault}, restart: {}}\n",
    );
    assert_eq!(e.field, "faults[0].restart.command");
}

#[test]
fn domains_actions_and_parameters_must_agree() {
    let cases = [
        (
            "{domain: network, action: kill, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].domain",
        ),
        (
            "{domain: worker, backend: proxy, action: reset, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].domain",
        ),
        (
            "{action: drain, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].domain",
        ),
        (
            "{domain: drain, action: kill, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].domain",
        ),
        (
            "{backend: proxy, domain: network, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].action",
        ),
        (
            "{action: reset, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].action",
        ),
        (
            "{action: kill, duration: 2s, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].duration",
        ),
        (
            "{domain: network, backend: proxy, action: delay, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].delay",
        ),
        (
            "{domain: network, backend: proxy, action: throttle, bytes_per_s: 0, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].bytes_per_s",
        ),
        (
            "{action: freeze, delay: 1s, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].delay",
        ),
        (
            "{backend: command, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].command",
        ),
        (
            "{backend: command, command: {inject: x}, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].command.verify",
        ),
        (
            "{backend: command, command: {inject: x, verify: v}, duration: 1s, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].command.heal",
        ),
        (
            "{command: {inject: x}, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].command",
        ),
        (
            "{action: freeze, restart: {}, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].restart",
        ),
        (
            "{domain: node, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].target.node",
        ),
        (
            "{at: {phase: fault}, when: {probe: {after_deltas: 0}}}",
            "faults[0].when.probe",
        ),
        (
            "{at: {phase: fault}, when: {probe: {after_deltas: 9}, max_tokens: 4}}",
            "faults[0].when.max_tokens",
        ),
        (
            "{at: {phase: fault}, when: {in_flight: 3}}",
            "faults[0].target",
        ),
        (
            "{at: {phase: fault}, when: {in_flight: 3, probe: prefill}, target: {replica: w1}}",
            "faults[0].when",
        ),
        (
            "{at: {phase: fault}, when: {}, target: {replica: w1}}",
            "faults[0].when",
        ),
    ];
    for (f, field) in cases {
        let e = err(SIM, &format!("  - {f}\n"));
        assert_eq!(e.field, field, "{f}: {e}");
        assert!(
            e.pos.is_some() || e.field.is_empty(),
            "{f}: no position: {e}"
        );
    }
}

/// The engine faults (issue 18): on sim workers only, each with the parameter it
/// reads, a GPU inside the engine's tensor-parallel group.
#[test]
fn engine_faults_take_their_parameters_and_stay_on_the_sims_engines() {
    let p = load(
        &SIM.replace("replicas: 3}", "replicas: 3, engine: {tensor_parallel_size: 4}}"),
        "  - {domain: gpu, backend: engine, action: gpu_lost, target: {replica: w1, gpu: 3}, at: {phase: fault}, duration: 2s}
  - {domain: gpu, backend: engine, action: gpu_hang, health: timeout, target: {replica: w2}, at: {phase: fault}, when: {in_flight: 1}}
  - {domain: worker, backend: engine, action: slow, factor: 8, target: {replica: w3}, at: {phase: fault}}
  - {domain: gpu, backend: engine, action: gpu_hang, target: {replica: w1}, at: {phase: fault, offset: 5s}}
",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let f = &p.faults;
    assert_eq!((f[0].action, f[0].gpu), (FaultAction::GpuLost, Some(3)));
    assert_eq!(f[1].health, Some(crate::scenario::HangHealth::Timeout));
    assert_eq!(f[2].factor, Some(8.0));
    assert_eq!(
        f[3].health,
        Some(crate::scenario::HangHealth::Pass),
        "default"
    );
    let cases = [
        (
            "{domain: gpu, action: gpu_lost, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].backend",
        ),
        (
            "{domain: gpu, backend: engine, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].action",
        ),
        (
            "{domain: gpu, backend: engine, action: kill, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].action",
        ),
        (
            "{domain: network, backend: engine, action: gpu_hang, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].domain",
        ),
        (
            "{domain: gpu, backend: engine, action: slow, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].factor",
        ),
        (
            "{domain: gpu, backend: engine, action: slow, factor: 0.5, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].factor",
        ),
        (
            "{domain: gpu, backend: engine, action: gpu_lost, factor: 2, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].factor",
        ),
        (
            "{domain: gpu, backend: engine, action: slow, factor: 2, health: pass, target: {replica: w1}, at: {phase: fault}}",
            "faults[0].health",
        ),
        (
            "{domain: gpu, backend: engine, action: gpu_lost, target: {replica: w1, gpu: 1}, at: {phase: fault}}",
            "faults[0].target.gpu",
        ),
        (
            "{domain: worker, backend: engine, action: gpu_lost, target: {replica: w1, gpu: 0}, at: {phase: fault}}",
            "faults[0].target.gpu",
        ),
        (
            "{domain: gpu, backend: engine, action: gpu_lost, target: {replica: w1}, at: {phase: fault}, restart: {}}",
            "faults[0].restart",
        ),
    ];
    for (f, field) in cases {
        let e = err(SIM, &format!("  - {f}\n"));
        assert_eq!(e.field, field, "{f}: {e}");
    }
    let e = err(
        URL,
        "  - {domain: gpu, backend: engine, action: gpu_lost, target: {replica: a}, at: {phase: fault}}\n",
    );
    assert_eq!(e.field, "faults[0].backend");
    assert!(e.reason.contains("command"), "{e}");
    let e = err(
        URL,
        "  - {domain: gpu, backend: engine, action: gpu_lost, at: {phase: fault}, when: {probe: first_delta}}\n",
    );
    assert_eq!(e.field, "faults[0].backend");
}

#[test]
fn fault_names_are_unique_and_a_killed_replica_is_gone_unless_replaced() {
    let e = err(
        SIM,
        "  - {name: x, target: {replica: w1}, at: {phase: fault}}\n  - {name: x, target: {replica: w2}, at: {phase: fault}}\n",
    );
    assert_eq!(e.field, "faults[1].name");
    let e = err(
        SIM,
        "  - {target: {replica: w1}, at: {phase: fault, offset: 5s}, action: freeze}\n  - {target: {replica: w1}, at: {phase: fault, offset: 1s}}\n",
    );
    assert_eq!(e.field, "faults[0].target.replica", "{e}");
    load(
        SIM,
        "  - {target: {replica: w1}, at: {phase: fault, offset: 1s}, restart: {}}\n  - {target: {replica: w1}, at: {phase: fault, offset: 5s}, name: again}\n",
    )
    .expect("a replaced replica can be faulted again");
}

/// A probe's lengths default from the workload's first class (a probe the engine
/// serves as it serves the load: a 1024-token default filled a small engine's context,
/// issue 21 item 8), its output at least the point's deltas; declared ones win.
#[test]
fn probe_lengths_default_from_the_workload() {
    let probe = |when: &str| {
        let p = load(
            SIM,
            &format!(
                "  - {{name: k, domain: worker, action: kill, at: {{phase: fault, offset: 1s}}, when: {when}}}\n"
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        match p.faults[0].trigger {
            Trigger::Probe {
                prompt_tokens,
                max_tokens,
                ..
            } => (prompt_tokens, max_tokens),
            ref t => panic!("{t:?}"),
        }
    };
    assert_eq!(probe("{probe: first_delta}"), (10, 10));
    assert_eq!(probe("{probe: {after_deltas: 12}}"), (10, 13));
    assert_eq!(
        probe("{probe: prefill, prompt_tokens: 300, max_tokens: 5}"),
        (300, 5)
    );
}
