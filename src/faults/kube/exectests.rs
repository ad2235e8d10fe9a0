//! Exec faults of the kubernetes backend against the mock API server: the exact exec
//! requests of inject, verify and heal (each a websocket exec answered with its output
//! and exit status), a failed verify or inject leaving the fault not applied, the heal
//! when the fault's duration ends, the heal ledger's entry and `haq heal`'s exec.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::super::ledger::{Remedy, open_entries};
use super::super::schedule::{Env, ProbeClient};
use super::super::{Context, HealGuard};
use super::tests::{POD, b, done, fire, heal, setup, verified_as};
use crate::target::kube::heal::{ExecAt, Leftover, heal_leftover};
use crate::target::kube::mock::{self, pod};
use crate::target::kube::tests::{Trace, plan};
use crate::target::registry::{Registry, Replica, Respawn};
use crate::trace::{Event, TraceWriter};

const STOP: &[&str] = &["pkill", "-STOP", "-f", "EngineCore"];
const STOPPED: &[&str] = &["pgrep", "-r", "T", "-f", "EngineCore"];
const CONT: &[&str] = &["pkill", "-CONT", "-f", "EngineCore"];

/// A freeze of w2's engine core only: SIGSTOP, proven by a stopped process, SIGCONT.
const FREEZE: [&str; 3] = [
    "faults[0].domain=gpu",
    "faults[0].action=freeze",
    "faults[0].exec={inject: [pkill, -STOP, -f, EngineCore], verify: [pgrep, -r, T, -f, EngineCore], heal: [pkill, -CONT, -f, EngineCore]}",
];

/// The exec request of `cmd` in `container` of pod llama-b.
fn exec_uri(container: &str, cmd: &[&str]) -> String {
    let args: String = cmd.iter().map(|c| format!("&command={c}")).collect();
    format!("{POD}/exec?&stdout=true&stderr=true&container={container}{args}")
}

fn strings(cmd: &[&str]) -> Vec<String> {
    cmd.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_execs_inject_verify_and_heal_in_the_pod_with_the_heal_in_the_ledger() {
    let (r, mut api, cx, dir) = setup("exec-freeze");
    let server = tokio::spawn(async move {
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", STOP), "", 0).await;
        api.exec(&exec_uri("llama", STOPPED), "4242", 0).await;
        // The heal: still the pod frozen; SIGCONT; no stopped engine core left.
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", CONT), "", 0).await;
        api.exec(&exec_uri("llama", STOPPED), "", 1).await;
        api
    });
    let (inj, undo) = fire(&FREEZE, &r, &cx).await;
    verified_as(
        &inj,
        "exec `pkill -STOP -f EngineCore` in llama-b/llama: exit 0; verify: exec `pgrep -r T -f EngineCore` in llama-b/llama: exit 0; output: 4242",
    );
    // In the ledger before the inject ran: what `haq heal` runs after a SIGKILL.
    let (open, _) = open_entries(&dir).expect("ledger");
    assert_eq!(open.len(), 1);
    assert_eq!(
        open[0].remedy,
        Remedy::KubeExec {
            context: "kind-haq".into(),
            namespace: "llm".into(),
            pod: "llama-b".into(),
            uid: "u-b".into(),
            container: "llama".into(),
            heal: strings(CONT),
            timeout_ms: 30_000,
        }
    );
    let h = heal(undo.expect("a heal")).await;
    assert!(h.verified, "{}", h.detail);
    assert_eq!(
        h.detail,
        "exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 0; exec `pgrep -r T -f EngineCore` in llama-b/llama: exit 1: the fault is gone"
    );
    assert!(open_entries(&dir).expect("ledger").0.is_empty(), "healed");
    done(server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_fault_whose_verify_or_inject_fails_is_not_applied() {
    let (r, mut api, cx, dir) = setup("exec-fail");
    let server = tokio::spawn(async move {
        // The verify exits 1: not applied (the heal still runs at the end).
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", STOP), "", 0).await;
        api.exec(&exec_uri("llama", STOPPED), "", 1).await;
        // The inject exits 1: not applied, nothing verified.
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", STOP), "pkill: killing pid 7 failed", 1)
            .await;
        // Refused: nothing ran, nothing left to heal.
        api.expect("GET", POD, None, 200, b()).await;
        let why = "cannot create resource \"pods/exec\"";
        api.refuse("GET", &exec_uri("llama", STOP), None, 403, "Forbidden", why)
            .await;
        // A container the pod does not have: no exec at all.
        api.expect("GET", POD, None, 200, b()).await;
        api
    });
    let (inj, undo) = fire(&FREEZE, &r, &cx).await;
    assert!(!inj.verified);
    assert_eq!(
        inj.detail,
        "exec `pkill -STOP -f EngineCore` in llama-b/llama: exit 0; not verified: verify: exec `pgrep -r T -f EngineCore` in llama-b/llama: exit 1"
    );
    assert!(undo.is_some(), "whatever the inject did is healed");
    let (inj, undo) = fire(&FREEZE, &r, &cx).await;
    assert_eq!(
        (inj.verified, inj.detail.as_str()),
        (
            false,
            "exec `pkill -STOP -f EngineCore` in llama-b/llama: exit 1; output: pkill: killing pid 7 failed: not applied"
        )
    );
    assert!(undo.is_some());
    let (inj, undo) = fire(&FREEZE, &r, &cx).await;
    assert!(!inj.verified && undo.is_none(), "{}", inj.detail);
    assert_eq!(
        inj.detail,
        "exec `pkill -STOP -f EngineCore` in llama-b/llama refused: 403 Forbidden: cannot create resource \"pods/exec\""
    );
    let mut sets = FREEZE.to_vec();
    let elsewhere = "faults[0].exec={inject: [pkill, -STOP, -f, EngineCore], verify: [pgrep, -r, T, -f, EngineCore], heal: [pkill, -CONT, -f, EngineCore], container: dcgm}";
    sets[2] = elsewhere;
    let (inj, undo) = fire(&sets, &r, &cx).await;
    assert!(!inj.verified && undo.is_none());
    assert_eq!(
        inj.detail,
        "pod llama-b has no container dcgm (its containers: llama, sidecar)"
    );
    // Open: the two applied (their heals pending); the refused one is closed.
    assert_eq!(open_entries(&dir).expect("ledger").0.len(), 2);
    done(server).await;
}

/// A `gpu_lost` with no verify of its own: the pod's readiness path answers an error
/// (a local server stands in for the pod's address) while the engine container has
/// not restarted; a container that restarted is a dead server, not a lost GPU.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_lost_is_verified_by_the_pods_health_failing_with_its_container_alive() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let app = axum::Router::new().route(
        "/health",
        axum::routing::get(|| async { (http::StatusCode::SERVICE_UNAVAILABLE, "EngineDeadError") }),
    );
    tokio::spawn(axum::serve(l, app).into_future());
    let (r, mut api, cx, _) = setup("exec-gpu-lost");
    r.set_direct_url(format!("http://127.0.0.1:{port}"));
    let kill = ["pkill", "-KILL", "-f", "EngineCore"];
    let server = tokio::spawn(async move {
        for restarts in [0, 1] {
            api.expect("GET", POD, None, 200, b()).await;
            api.exec(&exec_uri("llama", &kill), "", 0).await;
            let mut now = b();
            now["status"]["containerStatuses"][0]["restartCount"] = json!(restarts);
            api.expect("GET", POD, None, 200, now).await;
        }
        api
    });
    let lost = [
        "faults[0].domain=gpu",
        "faults[0].action=gpu_lost",
        "faults[0].exec=[pkill, -KILL, -f, EngineCore]",
    ];
    let (inj, undo) = fire(&lost, &r, &cx).await;
    assert!(undo.is_none(), "no heal given");
    verified_as(
        &inj,
        &format!(
            "exec `pkill -KILL -f EngineCore` in llama-b/llama: exit 0; GET http://127.0.0.1:{port}/health answered 503 after "
        ),
    );
    assert!(
        inj.detail.ends_with(
            "(the API server alive, its engine dead); container llama not restarted (0 restarts)"
        ),
        "{}",
        inj.detail
    );
    let (inj, _) = fire(&lost, &r, &cx).await;
    assert!(!inj.verified);
    assert!(
        inj.detail.ends_with(
            "not verified: container llama restarted (0 → 1 restarts): the whole server died, not only its engine"
        ),
        "{}",
        inj.detail
    );
    done(server).await;
}

/// The fault tasks' environment for `replicas`, its trace `tw`, the load starting now.
pub(super) fn env(
    replicas: Vec<Arc<Replica>>,
    cx: &Context,
    tw: TraceWriter,
    guard: &HealGuard,
) -> Arc<Env> {
    Arc::new(Env {
        registry: Arc::new(Registry {
            replicas,
            respawn: Respawn::Kube,
        }),
        heals: guard.heals(),
        trace: tw,
        clock: cx.clock,
        run_dir: cx.run_dir.clone(),
        seed: 7,
        board: None,
        probes: ProbeClient {
            http: crate::client::Http::new(
                Duration::from_secs(1),
                &http::HeaderMap::new(),
                crate::scenario::Transport::Auto,
            )
            .expect("http"),
            url: "http://127.0.0.1:9/v1/chat/completions".into(),
            model: "m".into(),
            timeouts: crate::client::Timeouts {
                first_token: Duration::from_secs(1),
                idle: Duration::from_secs(1),
            },
            marker: crate::workload::BodyMarker::none(),
            attribution: None,
        },
        admin: cx.http.clone(),
        say: Arc::new(|_| {}),
        load_start: Instant::now(),
        load_done: tokio_util::sync::CancellationToken::new(),
        stop: tokio_util::sync::CancellationToken::new(),
        ledger: cx.ledger.clone(),
    })
}

/// A freeze with `duration: 300ms` fired by the fault schedule: its heal is exec'd
/// when the duration ends (the load still running), recorded as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_fault_is_healed_by_its_heal_exec_when_its_duration_ends() {
    let (r, mut api, cx, dir) = setup("exec-duration");
    let server = tokio::spawn(async move {
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", STOP), "", 0).await;
        api.exec(&exec_uri("llama", STOPPED), "", 0).await;
        let applied = Instant::now();
        api.expect("GET", POD, None, 200, b()).await;
        let healed_after = applied.elapsed();
        api.exec(&exec_uri("llama", CONT), "", 0).await;
        api.exec(&exec_uri("llama", STOPPED), "", 1).await;
        (api, healed_after)
    });
    let mut sets = FREEZE.to_vec();
    sets.extend(["faults[0].at={phase: baseline}", "faults[0].duration=300ms"]);
    let p = plan(&sets);
    let trace = Trace::new("exec-duration");
    let guard = HealGuard::new(trace.tw.clone(), cx.clock);
    let env = env(vec![r], &cx, trace.tw.clone(), &guard);
    let faults = tokio::spawn(super::super::schedule::run(p.faults.clone(), env.clone()));
    let (api, healed_after) = server.await.expect("exact requests");
    assert!(
        healed_after >= Duration::from_millis(250),
        "healed after {healed_after:?}"
    );
    // The heal's verify answered: the heal is recorded before the load ends.
    tokio::time::sleep(Duration::from_millis(200)).await;
    env.load_done.cancel();
    faults.await.expect("faults");
    api.no_more(Duration::from_millis(100)).await;
    drop((env, guard));
    let heals: Vec<(String, Option<bool>)> = trace
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Heal {
                detail, verified, ..
            } => Some((detail, verified)),
            _ => None,
        })
        .collect();
    assert_eq!(heals.len(), 1, "{heals:?}");
    assert!(
        heals[0].0.starts_with(
            "duration 300ms ended: exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 0"
        ),
        "{heals:?}"
    );
    assert_eq!(heals[0].1, Some(true));
    assert!(open_entries(&dir).expect("ledger").0.is_empty());
}

/// What `haq heal` does with a killed run's exec entry, through the client of the
/// run's context: the pod read — still the one the fault hit — then the heal exec'd;
/// a pod replaced or gone since holds nothing of the fault (no exec); a heal that
/// exits 1 is not healed (the entry stays open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haq_heal_execs_a_killed_runs_heal_in_the_pod_it_hit() {
    let (client, mut api) = mock::pair();
    let server = tokio::spawn(async move {
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", CONT), "", 0).await;
        let other = pod("llama-b", "u-b2", "node-a", "10.0.0.7", true);
        api.expect("GET", POD, None, 200, other).await;
        api.refuse("GET", POD, None, 404, "NotFound", "gone").await;
        api.expect("GET", POD, None, 200, b()).await;
        api.exec(&exec_uri("llama", CONT), "", 1).await;
        api
    });
    let left = Leftover::Exec {
        at: ExecAt {
            namespace: "llm".into(),
            pod: "llama-b".into(),
            uid: "u-b".into(),
            container: "llama".into(),
        },
        heal: strings(CONT),
        timeout: Duration::from_secs(5),
    };
    let got = heal_leftover(&client, &left).await;
    assert_eq!(
        got.as_deref(),
        Ok("exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 0")
    );
    let got = heal_leftover(&client, &left).await;
    assert_eq!(
        got.as_deref(),
        Ok("pod llama-b was replaced (uid u-b2): nothing of the fault is left")
    );
    let got = heal_leftover(&client, &left).await;
    assert_eq!(
        got.as_deref(),
        Ok("pod llama-b is gone: nothing of the fault is left")
    );
    let got = heal_leftover(&client, &left).await;
    assert_eq!(
        got,
        Err("exec `pkill -CONT -f EngineCore` in llama-b/llama: exit 1".to_string())
    );
    done(server).await;
}
