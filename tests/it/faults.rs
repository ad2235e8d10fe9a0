//! Fault injection end to end on the sim: every backend under every trigger, each
//! fault verified, fired at its point, and healed.

use std::collections::BTreeMap;

use haq::trace::{Event, FaultLine};

use crate::support::{events, plan_text, run};

/// Three workers, light load, a long fault phase holding one fault per trigger.
const BASE: &str = r#"
name: faults-e2e
target:
  kind: sim
  replicas: 3
  gateway: {policy: reference, retry_budget: 2, health_interval: 100ms}
workload:
  seed: 5
  mix:
    classes:
      - {name: chat, prompt_tokens: {uniform: [100, 300]}, output_tokens: {uniform: [60, 100]}}
  arrival: {process: poisson, rate: 6/s}
protected_load: 6/s
slo: {ttft_p95: 10s, itl_p95: 2s, e2e_p95: 60s}
phases:
  - {name: baseline, duration: 1s}
  - {name: fault, duration: 8500ms}
  - {name: degraded, duration: 1s}
client: {drain_timeout: 20s}
faults:
"#;

/// The seven triggers: (name, `when` and `target` YAML, offset in the fault phase).
const TRIGGERS: [(&str, &str, &str); 8] = [
    ("time", "target: {replica: w1}", "200ms"),
    ("queued", "when: {probe: queued}", "1200ms"),
    (
        "prefill",
        "when: {probe: prefill, prompt_tokens: 2000}",
        "2200ms",
    ),
    (
        "computed",
        "when: {probe: {computed_not_sent: 3}}",
        "3200ms",
    ),
    ("first", "when: {probe: first_delta}", "4200ms"),
    ("deltas", "when: {probe: {after_deltas: 5}}", "5200ms"),
    (
        "load",
        "when: {in_flight: 2}\n    target: {replica: w1}",
        "6200ms",
    ),
    ("tool", "when: {probe: tool_call}", "7000ms"),
];

fn scenario(each: impl Fn(&str) -> String) -> String {
    let mut s = BASE.to_string();
    for (name, when, offset) in TRIGGERS {
        s.push_str(&format!(
            "  - name: {name}\n    at: {{phase: fault, offset: {offset}}}\n    {when}\n{}",
            each(name)
        ));
    }
    s
}

struct Seen {
    faults: BTreeMap<String, Vec<Event>>,
    heals: BTreeMap<String, Vec<Event>>,
    events: Vec<Event>,
}

fn collect(evs: Vec<Event>) -> Seen {
    let mut faults: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    let mut heals: BTreeMap<String, Vec<Event>> = BTreeMap::new();
    for e in &evs {
        match e {
            Event::Fault(FaultLine { name, .. }) => {
                faults.entry(name.clone()).or_default().push(e.clone())
            }
            Event::Heal { name, .. } => heals.entry(name.clone()).or_default().push(e.clone()),
            _ => {}
        }
    }
    Seen {
        faults,
        heals,
        events: evs,
    }
}

impl Seen {
    /// Trace time of the probe's n-th delivered delta (1-based).
    fn delta_t(&self, probe: &str, n: usize) -> Option<u64> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Chunk { id, kind, t, .. } if id == probe && kind.is_delta() => Some(*t),
                _ => None,
            })
            .nth(n - 1)
    }

    /// Checks every fault fired once, verified, at its point, and was healed.
    fn check_all(&self, healed: bool) {
        for (name, _, _) in TRIGGERS {
            let fs = self
                .faults
                .get(name)
                .unwrap_or_else(|| panic!("no fault record for {name}"));
            assert_eq!(fs.len(), 1, "{name}: {fs:?}");
            let Event::Fault(FaultLine {
                t,
                verified,
                detail,
                trigger,
                triggered,
                probe,
                replica,
                ..
            }) = &fs[0]
            else {
                unreachable!()
            };
            assert!(*verified, "{name}: {detail}");
            assert!(!replica.is_empty(), "{name}");
            let triggered = triggered.unwrap_or_else(|| panic!("{name}: no trigger time"));
            assert!(triggered <= *t, "{name}");
            let trigger = trigger.clone().unwrap_or_default();
            match name {
                "time" => assert_eq!(trigger, "time"),
                "load" => assert!(trigger.contains("in_flight >= 2 on w1"), "{trigger}"),
                _ => {
                    let p = probe.clone().unwrap_or_else(|| panic!("{name}: no probe"));
                    assert_eq!(p, format!("probe-{name}"));
                    // Client-side points fire after the deltas were delivered; path-side
                    // points before the gateway received what they hold.
                    match name {
                        "first" => assert!(
                            self.delta_t(&p, 1).is_some_and(|d| d <= triggered),
                            "{name}"
                        ),
                        "deltas" => assert!(
                            self.delta_t(&p, 5).is_some_and(|d| d <= triggered),
                            "{name}"
                        ),
                        "computed" => {
                            assert!(trigger.contains("computed_not_sent k=3"), "{trigger}");
                            assert!(
                                self.delta_t(&p, 3).is_none_or(|d| d > *t),
                                "{name}: delta 3 arrived before the fault"
                            );
                        }
                        _ => assert!(
                            self.delta_t(&p, 1).is_none_or(|d| d > *t),
                            "{name}: a delta arrived before the fault"
                        ),
                    }
                }
            }
            if healed {
                let hs = self
                    .heals
                    .get(name)
                    .unwrap_or_else(|| panic!("{name} was not healed"));
                for h in hs {
                    let Event::Heal {
                        verified, detail, ..
                    } = h
                    else {
                        unreachable!()
                    };
                    assert_eq!(*verified, Some(true), "{name}: {detail}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_backend_freezes_at_every_trigger_and_resumes() {
    let text = scenario(|_| "    action: freeze\n    duration: 700ms\n".into());
    let r = run(plan_text(&text, &[]), "faults-process").await;
    let seen = collect(events(&r));
    seen.check_all(true);
    for (name, fs) in &seen.faults {
        let Event::Fault(FaultLine { detail, pid, .. }) = &fs[0] else {
            unreachable!()
        };
        assert!(detail.contains("state T"), "{name}: {detail}");
        assert!(pid.is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_backend_applies_every_rule_at_every_trigger_and_heals() {
    let action = |name: &str| {
        match name {
            "time" => "action: blackhole",
            "queued" => "action: delay\n    delay: 100ms",
            "prefill" => "action: throttle\n    bytes_per_s: 4000",
            "computed" => "action: delay\n    delay: 50ms",
            "first" => "action: reset",
            "deltas" => "action: close",
            _ => "action: blackhole",
        }
        .to_string()
    };
    let text = scenario(|n| {
        format!(
            "    domain: network\n    backend: proxy\n    {}\n    duration: 700ms\n",
            action(n)
        )
    });
    let r = run(plan_text(&text, &[]), "faults-proxy").await;
    let seen = collect(events(&r));
    seen.check_all(true);
    let Event::Fault(FaultLine { detail, .. }) = &seen.faults["time"][0] else {
        unreachable!()
    };
    assert!(detail.contains("Blackhole rule active"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_backend_runs_at_every_trigger_with_its_context_and_heals() {
    let cmd = r#"    backend: command
    command:
      inject: echo "$HAQ_REPLICA $HAQ_PROBE_ID $HAQ_DOMAIN" > "$HAQ_RUN_DIR/$HAQ_FAULT.on"
      verify: cat "$HAQ_RUN_DIR/$HAQ_FAULT.on"
      heal: rm "$HAQ_RUN_DIR/$HAQ_FAULT.on"
    duration: 500ms
"#;
    let r = run(plan_text(&scenario(|_| cmd.into()), &[]), "faults-command").await;
    let seen = collect(events(&r));
    seen.check_all(true);
    for (name, fs) in &seen.faults {
        let Event::Fault(FaultLine {
            detail,
            replica,
            probe,
            ..
        }) = &fs[0]
        else {
            unreachable!()
        };
        let want = format!("{replica} {} worker", probe.clone().unwrap_or_default());
        assert!(
            detail.contains(want.trim()),
            "{name}: {detail} (wanted {want})"
        );
        assert!(
            !r.run_dir.join(format!("{name}.on")).exists(),
            "{name} not healed"
        );
    }
}

/// A fault that did not take effect is recorded as such: one whose verify command
/// fails and one whose command a `setsid` child would hold past its timeout (issue 15
/// item 2: the run goes on, "timed out") fail Failure-Domain; one whose trigger never
/// comes removed nothing and is named as unknown beside them. Never a silent pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_that_did_not_take_effect_fails_failure_domain() {
    let pidfile = crate::support::scratch("faults-held").join("escaped.pid");
    let text = format!(
        "{}{}",
        BASE.replace("duration: 8500ms", "duration: 3s"),
        r#"  - name: unverified
    backend: command
    command: {inject: "true", verify: "echo the rule is not there; exit 1"}
    target: {replica: w2}
    at: {phase: fault, offset: 500ms}
  - name: never-fired
    action: freeze
    target: {replica: w3}
    at: {phase: fault, offset: 500ms}
    when: {in_flight: 1000, within: 1s}
  - name: held
    backend: command
    command: {inject: "setsid sh -c 'echo $$ > PIDFILE; exec sleep 60' & sleep 60", verify: "true", timeout: 1s}
    target: {replica: w1}
    at: {phase: fault, offset: 500ms}
"#
        .replace("PIDFILE", &pidfile.display().to_string())
    );
    let t0 = std::time::Instant::now();
    let r = run(plan_text(&text, &[]), "faults-unverified").await;
    // Baseline and fault phases of a few seconds: never the minute the command asks.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(50),
        "{:?}",
        t0.elapsed()
    );
    let seen = collect(events(&r));
    let Event::Fault(FaultLine {
        verified, detail, ..
    }) = &seen.faults["held"][0]
    else {
        unreachable!()
    };
    assert!(!verified);
    assert!(detail.contains("timed out"), "{detail}");
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let Event::Fault(FaultLine {
        verified, detail, ..
    }) = &seen.faults["unverified"][0]
    else {
        unreachable!()
    };
    assert!(!verified);
    assert!(
        detail.contains("verify exit 1: the rule is not there"),
        "{detail}"
    );
    let Event::Fault(FaultLine {
        verified, detail, ..
    }) = &seen.faults["never-fired"][0]
    else {
        unreachable!()
    };
    assert!(!verified);
    assert!(detail.contains("never reached 1000"), "{detail}");
    let v = crate::support::verdict(&r, "Failure-Domain");
    assert_eq!(v.status, haq::check::Status::Fail, "{v:?}");
    assert!(
        v.summary.contains("unverified") && v.summary.contains("held"),
        "{}",
        v.summary
    );
    // The trigger that never came removed nothing: not a failure of the target, its
    // evidence is missing (issue 21 item 6), said beside the failures.
    assert!(
        v.evidence
            .iter()
            .any(|e| e.contains("never-fired") && e.contains("never reached 1000")),
        "{v:?}"
    );
    assert_eq!(r.judgement.overall(), haq::check::Status::Fail);
}

/// Failure domains beyond one worker: a node (both replicas declared on it, together)
/// killed and replaced — each replacement's Q11 stages recorded, the path reopening on
/// its own — and a planned drain (SIGTERM: not ready at once, in-flight work finishes,
/// then the process exits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_is_killed_and_replaced_and_a_drain_lets_the_worker_exit() {
    let text = BASE
        .replace(
            "  replicas: 3",
            "  replicas: [{name: w1, node: n1}, {name: w2, node: n1}, {name: w3, node: n2}, {name: w4, node: n2}]\n  engine: {cold_start: 300ms}",
        )
        .replace("duration: 8500ms", "duration: 5s")
        + r#"  - name: lose-n1
    domain: node
    action: kill
    target: {node: n1}
    at: {phase: fault, offset: 300ms}
    restart: {after: 200ms}
  - name: drain-w3
    domain: drain
    action: drain
    target: {replica: w3}
    at: {phase: fault, offset: 1s}
"#;
    let r = run(plan_text(&text, &[]), "faults-domains").await;
    let evs = events(&r);
    let seen = collect(evs.clone());
    let killed: std::collections::BTreeSet<_> = seen.faults["lose-n1"]
        .iter()
        .map(|e| match e {
            Event::Fault(FaultLine {
                replica,
                node,
                verified,
                detail,
                ..
            }) => {
                assert!(*verified, "{detail}");
                assert_eq!(node.as_deref(), Some("n1"));
                replica.clone()
            }
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(killed, ["w1".to_string(), "w2".into()].into());
    for w in ["w1", "w2"] {
        let stages: Vec<_> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Replacement { replica, stage, .. } if replica == w => Some(*stage),
                _ => None,
            })
            .collect();
        use haq::trace::ReplacementStage::*;
        assert_eq!(
            stages,
            vec![Requested, ProcessStarted, Ready, FirstRequestServed],
            "{w}"
        );
    }
    let Event::Fault(FaultLine {
        verified, detail, ..
    }) = &seen.faults["drain-w3"][0]
    else {
        unreachable!()
    };
    assert!(*verified, "{detail}");
    assert!(
        detail.contains("draining") || detail.contains("exited"),
        "{detail}"
    );
    assert!(
        evs.iter().any(|e| matches!(
            e,
            Event::Exited { replica, code: Some(0), fault: Some(f), .. } if replica == "w3" && f == "drain-w3"
        )),
        "the drained worker exits cleanly"
    );
    let fd = crate::support::verdict(&r, "Failure-Domain");
    assert_eq!(fd.status, haq::check::Status::Pass, "{fd:?}");
}
