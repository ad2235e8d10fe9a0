//! Bad input gets one clear error: file:line:col, field, value, reason.

use std::path::Path;

use super::*;
use crate::scenario::*;

pub(super) const GOOD: &str = r#"name: t
target: {kind: sim, replicas: 3}
workload:
  seed: 7
  mix:
    classes:
      - {name: chat, prompt_tokens: 100, output_tokens: {uniform: [10, 20]}}
protected_load: 4/s
slo: {ttft_p95: 1s, itl_p95: 50ms, e2e_p95: 10s}
phases:
  - {name: baseline, duration: 5s}
  - {name: fault, duration: 5s}
faults:
  - target: {replica: w2}
    at: {phase: fault, offset: 1s}
"#;

fn load(text: &str, sets: &[&str]) -> Result<Plan, ScenarioError> {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    load_str(text, "s.yaml", Path::new("."), &sets, None)
}

fn err(text: &str, sets: &[&str]) -> ScenarioError {
    match load(text, sets) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e,
    }
}

#[test]
fn good_scenario_becomes_a_plan() {
    let p = load(GOOD, &[]).expect("valid");
    assert_eq!(p.total.as_secs(), 10);
    assert_eq!(p.rate, 4.0);
    assert_eq!(p.replicas, vec!["w1", "w2", "w3"]);
    assert_eq!(p.faults[0].at.as_secs(), 6);
    assert_eq!(p.faults[0].name, "kill-w2");
    assert_eq!(p.phases[1].kind, PhaseKind::Fault);
}

#[test]
fn unknown_field_points_at_the_key() {
    let text = GOOD.replace(
        "target: {kind: sim, replicas: 3}",
        "target: {kind: sim, replicas: 3, replcas: 4}",
    );
    let e = err(&text, &[]);
    assert_eq!(e.source, "s.yaml");
    assert_eq!(e.pos.map(|p| (p.line, p.col)), Some((2, 34)), "{e}");
    assert!(e.reason.contains("unknown field `replcas`"), "{e}");
    assert!(
        e.to_string().starts_with("s.yaml:2:34: `target.replcas`"),
        "{e}"
    );
}

#[test]
fn wrong_type_names_field_and_place() {
    let e = err(&GOOD.replace("replicas: 3", "replicas: three"), &[]);
    assert_eq!(e.field, "target.replicas");
    assert_eq!(e.pos.map(|p| p.line), Some(2));
}

#[test]
fn negative_duration_is_rejected_with_position() {
    let e = err(
        &GOOD.replace(
            "{name: fault, duration: 5s}",
            "{name: fault, duration: -5s}",
        ),
        &[],
    );
    assert_eq!(e.field, "phases[1].duration");
    assert_eq!(e.pos.map(|p| p.line), Some(12));
    assert!(e.reason.contains("negative"), "{e}");
}

#[test]
fn zero_p95_slo_is_impossible() {
    let e = err(&GOOD.replace("ttft_p95: 1s", "ttft_p95: 0ms"), &[]);
    assert_eq!(e.field, "slo.ttft_p95");
    assert_eq!(e.value.as_deref(), Some("0s"));
    assert!(e.reason.contains("greater than 0"));
    assert_eq!(e.pos.map(|p| p.line), Some(9));
}

#[test]
fn abandonment_needs_exactly_one_way_of_leaving_and_says_where() {
    let with = |a: &str| {
        GOOD.replace(
            "output_tokens: {uniform: [10, 20]}}",
            &format!("output_tokens: {{uniform: [10, 20]}}, abandon: {a}}}"),
        )
    };
    let p = load(&with("{share: 30%, after_deltas: 2}"), &[]).expect("valid");
    let a = p.mix.classes[0].abandon.as_ref().expect("abandon");
    assert_eq!(a.leave(), Some(Leave::AfterDeltas(2)));
    let e = err(&with("{share: 30%, after_deltas: 2, after: 1s}"), &[]);
    assert_eq!(e.field, "workload.mix.classes[0].abandon");
    assert_eq!(e.pos.map(|p| p.line), Some(7), "{e}");
    assert!(e.reason.contains("exactly one of"), "{e}");
    assert!(e.to_string().starts_with("s.yaml:7:"), "{e}");
    let e = err(&with("{share: 30%}"), &[]);
    assert!(e.reason.contains("exactly one of"), "{e}");
    let e = err(&with("{share: 30%, after_deltas: 0}"), &[]);
    assert_eq!(e.field, "workload.mix.classes[0].abandon.after_deltas");
    let e = err(&with("{share: 0%, before_first_token: true}"), &[]);
    assert_eq!(e.field, "workload.mix.classes[0].abandon.share");
    let e = err(&with("{share: 30%, after: 0s}"), &[]);
    assert_eq!(e.field, "workload.mix.classes[0].abandon.after");
    let e = err(&with("{share: 30%, after_delta: 2}"), &[]);
    assert!(e.reason.contains("unknown field `after_delta`"), "{e}");
    assert_eq!(e.pos.map(|p| p.line), Some(7), "{e}");
    // `haq schema` tells editors about it.
    let s = json_schema();
    let a = &s["$defs"]["Abandon"]["properties"];
    for k in ["share", "before_first_token", "after_deltas", "after"] {
        assert!(a.get(k).is_some(), "{k}: {a}");
    }
}

#[test]
fn killing_a_replica_that_does_not_exist() {
    let e = err(GOOD, &["target.replicas=1"]);
    assert_eq!(e.field, "faults[0].target.replica");
    assert_eq!(e.value.as_deref(), Some("w2"));
    assert!(e.reason.contains("no such replica"), "{e}");
    assert_eq!(e.pos.map(|p| p.line), Some(14));
}

#[test]
fn killing_more_replicas_than_exist() {
    let text = format!("{GOOD}  - target: {{replica: w2}}\n    at: {{phase: fault, offset: 2s}}\n");
    let e = err(&text, &[]);
    assert_eq!(e.field, "faults[1].target.replica");
    assert!(e.reason.contains("already killed"), "{e}");
}

#[test]
fn fault_offset_outside_its_phase() {
    let e = err(GOOD, &["faults[0].at.offset=9s"]);
    assert_eq!(e.field, "faults[0].at.offset");
    assert!(e.source.starts_with("--set"), "{e}");
}

#[test]
fn overrides_change_the_effective_scenario() {
    let p = load(
        GOOD,
        &[
            "target.replicas=5",
            "target.gateway.policy=naive-retry",
            "workload.mix.classes[0].output_tokens=3",
        ],
    )
    .expect("valid");
    assert_eq!(p.scenario.target.replica_set().count(), 5);
    assert_eq!(p.scenario.target.gateway.policy, GatewayPolicy::NaiveRetry);
    assert_eq!(p.mix.classes[0].output_tokens, Dist::Fixed(3));
    let e = err(GOOD, &["target.gateway.policy=bogus"]);
    assert!(e.source.contains("target.gateway.policy=bogus"), "{e}");
    let e = err(GOOD, &["nopath"]);
    assert!(e.reason.contains("PATH=VALUE"), "{e}");
}

#[test]
fn streaming_retry_is_never_legal() {
    let e = err(GOOD, &["policy.streaming=retry"]);
    assert_eq!(e.field, "policy.streaming");
}

#[test]
fn the_fate_policy_is_checked_per_stage_and_its_error_shape_by_name() {
    let e = err(GOOD, &["policy.decode=reroute"]);
    assert_eq!(e.field, "policy.decode");
    assert!(e.reason.contains("new` and `queued` only"), "{e}");
    let e = err(GOOD, &["policy.new=recompute"]);
    assert_eq!(e.field, "policy.new");
    let e = err(GOOD, &["policy.error_shape=sed"]);
    assert!(e.reason.contains("unknown error shape `sed`"), "{e}");
    let e = err(GOOD, &["policy.error_shape={}"]);
    assert!(e.reason.contains("needs `required` or `equals`"), "{e}");
    let p = load(
        GOOD,
        &[
            "policy.streaming=migrate",
            "policy.error_shape={required: [error.message], equals: {error.type: upstream_error}}",
        ],
    )
    .expect("valid");
    assert_eq!(p.scenario.policy.streaming, Fate::Migrate);
    assert!(matches!(
        p.scenario.policy.error_shape,
        ErrorShape::Custom(_)
    ));
    // The recorded scenario reads back the same.
    let json = serde_json::to_string(&p.scenario).expect("json");
    let back = from_recorded_json(&json).expect("reads back");
    assert_eq!(
        back.scenario.policy.error_shape,
        p.scenario.policy.error_shape
    );
    let e = err(GOOD, &["evidence.attempt_header=bad header"]);
    assert_eq!(e.field, "evidence.attempt_header");
}

#[test]
fn offered_rate_below_protected_load() {
    let e = err(GOOD, &["workload.arrival.rate=2/s"]);
    assert!(e.reason.contains("protected_load"), "{e}");
}

#[test]
fn yaml_syntax_error_has_position() {
    let e = err("name: t\ntarget: {kind: sim\nslo: 1\n", &[]);
    assert!(e.pos.is_some(), "{e}");
    assert!(e.reason.starts_with("not valid YAML"), "{e}");
}

#[test]
fn workload_file_errors_point_into_that_file() {
    let dir = std::env::temp_dir().join(format!("haq-scn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(
        dir.join("mix.yaml"),
        "classes:\n  - name: a\n    prompt_tokens: 10\n    output_tokens: {uniform: [30, 20]}\n",
    )
    .expect("write");
    let text = GOOD.replace(
        "  mix:\n    classes:\n      - {name: chat, prompt_tokens: 100, output_tokens: {uniform: [10, 20]}}\n",
        "  mix: mix.yaml\n",
    );
    let e = load_str(&text, "s.yaml", &dir, &[], None).expect_err("error");
    assert!(e.source.ends_with("mix.yaml"), "{e}");
    assert_eq!(e.field, "workload.mix.classes[0].output_tokens");
    assert_eq!(e.pos.map(|p| p.line), Some(4), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn shipped_scenarios_and_starter_are_valid() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(root.join("scenarios")).expect("scenarios/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            if let Err(e) = super::load(&path, &[], None) {
                panic!("{}: {e}", path.display());
            }
            // As the README runs them: relative to the repository root (the test's
            // working directory), mixes in ../workloads naming their own input files.
            let rel = Path::new("scenarios").join(path.file_name().expect("name"));
            if let Err(e) = super::load(&rel, &[], None) {
                panic!("{}: {e}", rel.display());
            }
            n += 1;
        }
    }
    assert!(n >= 1);
    let p = load(crate::scenario::STARTER, &[]).expect("starter valid");
    assert_eq!(p.faults.len(), 1);
}

#[test]
fn schema_lists_the_sections() {
    let s = json_schema();
    let props = s["properties"].as_object().expect("properties");
    for k in [
        "target",
        "workload",
        "slo",
        "protected_load",
        "policy",
        "phases",
        "faults",
        "criteria",
        "report",
    ] {
        assert!(props.contains_key(k), "{k}");
    }
}

#[test]
fn recorded_scenario_reads_back_to_the_same_plan() {
    let p = load(GOOD, &["target.replicas=4"]).expect("valid");
    let json = serde_json::to_string(&p.scenario).expect("json");
    let q = from_recorded_json(&json).expect("reads back");
    assert_eq!(q.scenario.target.replica_set().count(), 4);
    assert_eq!(q.total, p.total);
    assert_eq!(q.faults[0].at, p.faults[0].at);
}

#[test]
fn a_readiness_watch_faster_than_10ms_is_refused() {
    let e = err(GOOD, &["evidence.readiness_watch=1ms"]);
    assert_eq!(e.field, "evidence.readiness_watch");
    assert!(e.reason.contains("at least 10ms"), "{}", e.reason);
    assert!(load(GOOD, &["evidence.readiness_watch=250ms"]).is_ok());
}

#[test]
fn warm_connections_are_bounded_and_point_at_their_line() {
    let text = format!("{GOOD}client: {{warm_connections: 20000}}\n");
    let e = err(&text, &[]);
    assert_eq!(e.field, "client.warm_connections");
    assert_eq!(e.value.as_deref(), Some("20000"));
    assert!(e.reason.contains("at most 10000"), "{}", e.reason);
    assert_eq!(e.pos.map(|p| (p.line, p.col)), Some((16, 28)), "{e}");
    let ok = load(GOOD, &["client.warm_connections=64"]).expect("64 is fine");
    assert_eq!(ok.scenario.client.warm_connections, 64);
    assert_eq!(
        load(GOOD, &[])
            .expect("good")
            .scenario
            .client
            .warm_connections,
        0
    );
}

#[test]
fn the_transport_is_auto_unless_named_and_an_unknown_one_points_at_its_line() {
    assert_eq!(
        load(GOOD, &[]).expect("good").scenario.client.transport,
        Transport::Auto
    );
    let ok = load(GOOD, &["client.transport=reqwest"]).expect("reqwest is fine");
    assert_eq!(ok.scenario.client.transport, Transport::Reqwest);
    for t in [Transport::Auto, Transport::Reqwest] {
        let set = format!("client.transport={}", t.as_str());
        assert_eq!(
            load(GOOD, &[&set])
                .expect("its own name")
                .scenario
                .client
                .transport,
            t
        );
    }
    let text = format!("{GOOD}client: {{transport: h2}}\n");
    let e = err(&text, &[]);
    assert!(e.field.contains("transport"), "{e}");
    assert!(
        e.reason.contains("auto") && e.reason.contains("reqwest"),
        "{e}"
    );
    assert_eq!(e.pos.map(|p| p.line), Some(16), "{e}");
}

#[test]
fn the_removed_max_slip_p99_says_what_replaced_it_at_its_line() {
    let text = format!("{GOOD}client: {{max_slip_p99: 5ms}}\n");
    let e = err(&text, &[]);
    assert_eq!(e.field, "client.max_slip_p99");
    assert_eq!(e.pos.map(|p| (p.line, p.col)), Some((16, 24)), "{e}");
    for now in [
        "client.max_late",
        "client.max_p95_shift",
        "client.max_load_error",
    ] {
        assert!(e.reason.contains(now), "{}", e.reason);
    }
    assert_eq!(
        err(GOOD, &["client.max_slip_p99=5ms"]).field,
        "client.max_slip_p99"
    );
    // The bounds that replaced it, and their defaults; max_late keeps its meaning. By
    // default the stall bound is the tightest latency objective, at most 1 s.
    let s = load(GOOD, &[]).expect("good").scenario;
    let c = &s.client;
    assert_eq!(
        (c.max_late, c.max_p95_shift.0, c.max_load_error.0),
        (None, 0.10, 0.05)
    );
    assert_eq!(c.stall_bound(&s.slo).as_millis(), 1000, "TTFT 1s");
    let s = load(GOOD, &["slo.ttft_p95=300ms"]).expect("good").scenario;
    assert_eq!(s.client.stall_bound(&s.slo).as_millis(), 300, "TTFT 300ms");
    let s = load(GOOD, &["slo.ttft_p95=5s"]).expect("good").scenario;
    assert_eq!(
        s.client.stall_bound(&s.slo).as_millis(),
        1000,
        "at most 1 s"
    );
    let s = load(GOOD, &["client.max_late=2s"]).expect("good").scenario;
    assert_eq!(s.client.stall_bound(&s.slo).as_millis(), 2000, "as set");
    let e = err(GOOD, &["client.max_late=0s"]);
    assert_eq!(e.field, "client.max_late");
    let e = err(GOOD, &["client.max_p95_shift=150%"]);
    assert_eq!(e.field, "client.max_p95_shift");
    // A run recorded before issue 21 still reads: judged by today's rule.
    let mut recorded =
        serde_json::to_value(&load(GOOD, &[]).expect("good").scenario).expect("json");
    recorded["client"]["max_slip_p99"] = "5ms".into();
    recorded["client"]["max_late"] = "50ms".into();
    let p = from_recorded_json(&recorded.to_string()).expect("an old run reads");
    let c = &p.scenario.client;
    assert_eq!(
        (c.max_slip_p99.is_none(), c.max_late),
        (true, None),
        "old default"
    );
    recorded["client"]["max_late"] = "2s".into();
    let p = from_recorded_json(&recorded.to_string()).expect("an old run reads");
    assert_eq!(
        p.scenario.client.max_late.map(|d| d.0.as_secs()),
        Some(2),
        "as set"
    );
}

/// A header that would split the request (CR, LF) or a bad header name is one error at
/// its line, before anything starts (issue 15 item 8); the value is not shown (it may
/// be a key).
#[test]
fn bad_header_names_and_values_are_refused_at_their_line() {
    let text = GOOD.replace(
        "target: {kind: sim, replicas: 3}",
        "target:\n  kind: sim\n  replicas: 3\n  headers:\n    x-ok: fine\n    x-bad: \"a\\r\\nb: c\"",
    );
    let e = err(&text, &[]);
    let shown = e.to_string();
    assert!(shown.starts_with("s.yaml:7:"), "{shown}");
    assert!(shown.contains("`target.headers.x-bad`"), "{shown}");
    assert!(shown.contains("not a valid header value"), "{shown}");
    assert!(!shown.contains("b: c"), "{shown}");
    let e = err(GOOD, &["target.headers.bad name=x"]);
    assert!(e.to_string().contains("not a valid header name"), "{e}");
    assert!(
        e.to_string().starts_with("--set target.headers.bad name=x"),
        "{e}"
    );
}

/// A scenario must be a regular file of bounded size: /dev/zero would be read until
/// memory ran out, a FIFO would block forever.
#[test]
fn a_scenario_must_be_a_regular_file_of_bounded_size() {
    let e = load_path("/dev/zero");
    assert!(e.contains("not a regular file"), "{e}");
    let dir = std::env::temp_dir().join(format!("haq-big-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let fifo = dir.join("fifo.yaml");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let e = load_path(&fifo.display().to_string());
        assert!(e.contains("not a regular file"), "{e}");
    }
    let big = dir.join("big.yaml");
    let f = std::fs::File::create(&big).expect("create");
    f.set_len(crate::scenario::MAX_FILE_BYTES + 1)
        .expect("size");
    let e = load_path(&big.display().to_string());
    assert!(e.contains("larger than"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn load_path(p: &str) -> String {
    match super::load(Path::new(p), &[], None) {
        Ok(_) => panic!("{p} accepted"),
        Err(e) => e.to_string(),
    }
}

/// `target.engine.speed` scales the sim's step times (issue 19 item 3): a factor in
/// [0.001, 1000], refused where it is written.
#[test]
fn the_engine_speed_is_a_bounded_factor_refused_at_its_line() {
    let text = GOOD.replace(
        "target: {kind: sim, replicas: 3}",
        "target:\n  kind: sim\n  replicas: 3\n  engine: {speed: 0}",
    );
    let e = err(&text, &[]);
    assert_eq!(e.field, "target.engine.speed");
    assert!(e.reason.contains("between 0.001 and 1000"), "{}", e.reason);
    assert!(e.to_string().starts_with("s.yaml:5:"), "{e}");
    assert_eq!(
        err(GOOD, &["target.engine.speed=1e9"]).field,
        "target.engine.speed"
    );
    let p = load(GOOD, &["target.engine.speed=2.5"]).expect("2.5 is fine");
    assert_eq!(p.scenario.target.engine.speed, 2.5);
}

/// `criteria.capacity.search` is the adaptive search (issue 19 item 1): the fixed
/// ladder's fields are refused where they are written, naming what replaced them; a
/// fault the degraded topology cannot hold (no named replica) is refused too.
#[test]
fn the_capacity_searchs_old_ladder_fields_are_refused_at_their_line() {
    let text =
        format!("{GOOD}criteria:\n  capacity:\n    search: {{from: 4/s, to: 20/s, steps: 5}}\n");
    let e = err(&text, &[]);
    assert_eq!(e.field, "criteria.capacity.search.to");
    assert!(
        e.reason.contains("the fixed ladder is gone"),
        "{}",
        e.reason
    );
    assert!(e.reason.contains("`precision`"), "{}", e.reason);
    assert!(e.to_string().starts_with("s.yaml:18:29:"), "{e}");
    let e = err(GOOD, &["criteria.capacity.search={settle: 5s}"]);
    assert_eq!(e.field, "criteria.capacity.search.settle");
    for (set, field) in [
        ("{factor: 1}", "factor"),
        ("{precision: 0%}", "precision"),
        ("{max_steps: 1}", "max_steps"),
        ("{overload: [0.5]}", "overload"),
        ("{from: 0/s}", "from"),
    ] {
        let e = err(GOOD, &[&format!("criteria.capacity.search={set}")]);
        assert_eq!(
            e.field,
            format!("criteria.capacity.search.{field}"),
            "{set}: {e}"
        );
    }
    let e = err(
        GOOD,
        &["criteria.capacity.search={}", "faults[0].target=null"],
    );
    assert_eq!(e.field, "faults[0].target");
    assert!(e.reason.contains("name the replica"), "{}", e.reason);
    // The defaults: from the protected load, doubling, ±5%, 8 steps, 1.5× and 2×.
    let p = load(GOOD, &["criteria.capacity.search={}"]).expect("defaults");
    let s = crate::plan::capacity::Params::of(&p).expect("search");
    assert_eq!(
        (s.bisect.start, s.bisect.factor, s.bisect.precision),
        (4.0, 2.0, 0.05)
    );
    assert_eq!(
        (s.bisect.max_steps, s.overload.as_slice()),
        (8, &[1.5, 2.0][..])
    );
    assert_eq!(s.topologies.len(), 2);
    // The plan's phases are the scenario's own: the search runs after them.
    assert_eq!(p.phases.len(), 2);
    let text = crate::plan::describe::render(&crate::plan::describe::describe(&p));
    assert!(
        text.contains("then the capacity search (criteria.capacity.search)")
            && text.contains("bisected to ±5% in at most 8 steps per topology")
            && text.contains("overload steps at 1.5×, 2× C_degraded"),
        "{text}"
    );
    // Its overload steps exercise Overload (a required Overload is judged by them).
    let ex = crate::plan::implied::exercised(&p);
    assert!(
        ex.iter()
            .any(|(v, why)| *v == VerdictName::Overload && why.contains("overload steps")),
        "{ex:?}"
    );
}
