//! Behind a gateway that forwards no request header (issue 21 items 1 and 4): a small
//! independent gateway written here (axum, loopback) in front of two sim workers, each
//! behind haq's proxy (a `url` target). It forwards each body byte for byte and no
//! header of the client's — no `x-request-id` — so haq's proxy can tie an upstream
//! request to its client request only by the marker in the body.
//!
//! In `splice` mode, after the first content delta it abandons the upstream request,
//! sends the same body to the other replica, skips the deltas the client already has
//! and splices the rest on under the first answer's chunk ids: the client's stream is
//! a clean answer, byte for byte what one replica would have sent. Only the upstream
//! side shows two requests for one client stream.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::Response;
use haq::check::Status;
use haq::check::fate::FindingKind;
use haq::trace::{Event, FaultLine, LegBy};
use serde_json::json;

use crate::simkit::{Proc, free_port, host_port, worker_in};
use crate::support::{events, plan_text, run, scratch, verdict};

#[derive(Clone)]
struct Gw {
    ups: Arc<[String; 2]>,
    next: Arc<AtomicUsize>,
    splice: bool,
    http: reqwest::Client,
}

impl Gw {
    async fn send(&self, i: usize, body: &Bytes) -> reqwest::Result<reqwest::Response> {
        self.http
            .post(format!("{}/v1/chat/completions", self.ups[i]))
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
    }
}

/// The gateway on a loopback port, in front of `ups` (round robin).
async fn gateway(ups: [String; 2], splice: bool) -> String {
    let gw = Gw {
        ups: Arc::new(ups),
        next: Arc::new(AtomicUsize::new(0)),
        splice,
        http: reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
    };
    let app = axum::Router::new()
        .route(
            "/v1/models",
            axum::routing::get(|| async { r#"{"object":"list","data":[]}"# }),
        )
        .route("/v1/chat/completions", axum::routing::post(chat))
        .with_state(gw);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    format!("http://{addr}")
}

fn status(code: u16) -> Response {
    Response::builder()
        .status(code)
        .body(Body::empty())
        .unwrap_or_default()
}

async fn chat(State(gw): State<Gw>, body: Bytes) -> Response {
    let i = gw.next.fetch_add(1, Ordering::Relaxed) % 2;
    let up = match gw.send(i, &body).await {
        Ok(r) if r.status() == 200 => r,
        Ok(r) => {
            let code = r.status().as_u16();
            return Response::builder()
                .status(code)
                .body(Body::from(r.bytes().await.unwrap_or_default()))
                .unwrap_or_else(|_| status(502));
        }
        Err(_) => return status(502),
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let named = gw.ups[i].clone();
    tokio::spawn(relay(gw, i, body, up, tx));
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    Response::builder()
        .header("content-type", "text/event-stream")
        // The gateway's own attribution: the upstream's URL (haq's proxy for it).
        .header("x-upstream", named)
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| status(502))
}

type Tx = tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>;

/// The next whole SSE event of `up` (`buf` keeps what follows it); `Err` when the
/// upstream broke, `Ok(None)` at its end.
async fn next_event(up: &mut reqwest::Response, buf: &mut Vec<u8>) -> Result<Option<String>, ()> {
    loop {
        if let Some(p) = buf.windows(2).position(|w| w == b"\n\n") {
            let ev: Vec<u8> = buf.drain(..p + 2).collect();
            return Ok(Some(String::from_utf8_lossy(&ev).into_owned()));
        }
        match up.chunk().await {
            Ok(Some(b)) => buf.extend_from_slice(&b),
            Ok(None) => return Ok(None),
            Err(_) => return Err(()),
        }
    }
}

fn is_delta(ev: &str) -> bool {
    ev.contains("\"content\":\"")
}

/// `data: {"id":…,"object":…,"created":…,"model":…,` of a chunk event.
fn head(ev: &str) -> Option<&str> {
    ev.find("\"choices\":").map(|i| &ev[..i])
}

async fn pass(tx: &Tx, ev: String) -> bool {
    tx.send(Ok(Bytes::from(ev))).await.is_ok()
}

/// Relays the upstream's events; in splice mode, re-sends after the first delta and
/// splices the other replica's answer on under the first one's chunk head.
async fn relay(gw: Gw, i: usize, body: Bytes, mut up: reqwest::Response, tx: Tx) {
    let mut buf = Vec::new();
    let mut first_head: Option<String> = None;
    let mut delivered = 0;
    loop {
        match next_event(&mut up, &mut buf).await {
            Ok(Some(ev)) => {
                if first_head.is_none() {
                    first_head = head(&ev).map(str::to_string);
                }
                let delta = is_delta(&ev);
                if !pass(&tx, ev).await {
                    return;
                }
                delivered += usize::from(delta);
                if gw.splice && delivered == 1 {
                    break;
                }
            }
            Ok(None) => return,
            Err(()) => {
                let _ = tx.send(Err(std::io::Error::other("upstream broke"))).await;
                return;
            }
        }
    }
    drop(up); // the first upstream request is abandoned mid-stream
    let Ok(mut up) = gw.send(1 - i, &body).await else {
        return;
    };
    let mut buf = Vec::new();
    let mut skipped = 0;
    while let Ok(Some(ev)) = next_event(&mut up, &mut buf).await {
        if is_delta(&ev) && skipped < delivered {
            skipped += 1;
            continue;
        }
        let ev = match (head(&ev), &first_head) {
            (Some(h), Some(first)) => format!("{first}{}", &ev[h.len()..]),
            _ => ev,
        };
        if !pass(&tx, ev).await {
            return;
        }
    }
}

/// Two workers, the gateway in front of haq's proxy ports for them.
struct Bed {
    a: Proc,
    b: Proc,
    gateway: String,
    listens: [u16; 2],
}

async fn bed(name: &str, splice: bool) -> Bed {
    let dir = scratch(name);
    let a = worker_in(&dir, "a", json!({}), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", json!({}), None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let gateway = gateway(listens.map(|p| format!("http://127.0.0.1:{p}")), splice).await;
    Bed {
        a,
        b,
        gateway,
        listens,
    }
}

impl Bed {
    fn scenario(&self, phases: &str, faults: &str) -> String {
        format!(
            r#"name: no-header-gateway
target:
  kind: url
  url: {gw}/v1
  replicas:
    - name: a
      upstream: {ua}
      listen: 127.0.0.1:{la}
      process: {{pid: {pa}, ready_path: /ready}}
    - name: b
      upstream: {ub}
      listen: 127.0.0.1:{lb}
      process: {{pid: {pb}, ready_path: /ready}}
workload:
  seed: 11
  mix:
    classes: [{{name: chat, prompt_tokens: {{uniform: [50, 150]}}, output_tokens: {{uniform: [20, 30]}}}}]
  arrival: {{process: poisson, rate: 4/s}}
protected_load: 4/s
slo: {{ttft_p95: 5s, itl_p95: 1s, e2e_p95: 30s, error_rate_max: 100%}}
client: {{max_late: 3s}}
phases:
{phases}
faults:
{faults}"#,
            gw = self.gateway,
            ua = host_port(self.a.url()),
            ub = host_port(self.b.url()),
            la = self.listens[0],
            lb = self.listens[1],
            pa = self.a.p.pid,
            pb = self.b.p.pid,
        )
    }
}

/// The proxy's lines: (replica, id, by) of each upstream request.
fn legs(evs: &[Event]) -> Vec<(String, Option<String>, Option<LegBy>)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::ProxyRequest {
                replica, id, by, ..
            } => Some((replica.clone(), id.clone(), *by)),
            _ => None,
        })
        .collect()
}

/// A re-send to another replica after the first delta, spliced on under the original
/// chunk ids, is a Request-Fate FAIL naming both upstream requests, though every
/// client stream is one clean answer; the same gateway without the re-send gives no
/// finding, and requests.csv names the replica from the proxy's attribution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resend_after_the_first_delta_behind_a_gateway_without_headers_fails_request_fate() {
    let phases = "  - {name: baseline, duration: 2s}";
    let spliced = bed("splice", true).await;
    let r = run(plan_text(&spliced.scenario(phases, "  []"), &[]), "splice").await;
    let evs = events(&r);
    // No header reached the proxies: every upstream request was tied by its marker.
    let l = legs(&evs);
    assert!(l.len() >= 8, "{l:?}");
    assert!(
        l.iter()
            .all(|(_, id, by)| id.is_some() && *by == Some(LegBy::Marker)),
        "{l:?}"
    );
    // Each client stream is one answer under one chunk id, read to its end.
    let mut cids: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    for e in &evs {
        if let Event::Chunk {
            id, cid: Some(c), ..
        } = e
        {
            cids.entry(id.clone()).or_default().insert(c.clone());
        }
    }
    assert!(cids.values().all(|c| c.len() == 1), "{cids:?}");
    let fate = verdict(&r, "Request-Fate");
    assert_eq!(fate.status, Status::Fail, "{fate:?}");
    let f = r
        .judgement
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::RetryAfterFirstDelta)
        .unwrap_or_else(|| panic!("{:#?}", r.judgement.findings));
    assert!(
        f.detail
            .contains("haq's proxy saw a second upstream request"),
        "{f:?}"
    );
    let named: Vec<&str> = f
        .attempts
        .iter()
        .map(|a| a.split('#').next().unwrap_or(""))
        .collect();
    assert!(named == ["a", "b"] || named == ["b", "a"], "{f:?}");
    assert!(
        r.judgement
            .findings
            .iter()
            .any(|f| f.kind == FindingKind::StitchedOutput),
        "{:#?}",
        r.judgement.findings
    );
    drop(spliced);
    // Without the marker the proxy cannot tie the legs to the stream: the splice
    // passes unseen, as it did before haq read bodies.
    let unmarked = bed("splice-unmarked", true).await;
    let text = unmarked.scenario(phases, "  []");
    let r = run(plan_text(&text, &["client.marker=none"]), "splice-unmarked").await;
    assert!(
        r.judgement.findings.is_empty(),
        "{:#?}",
        r.judgement.findings
    );
    assert!(legs(&events(&r)).iter().all(|(_, id, _)| id.is_none()));
    drop(unmarked);

    let plain = bed("no-splice", false).await;
    let r = run(plan_text(&plain.scenario(phases, "  []"), &[]), "no-splice").await;
    assert!(
        r.judgement.findings.is_empty(),
        "{:#?}",
        r.judgement.findings
    );
    assert_ne!(verdict(&r, "Request-Fate").status, Status::Fail);
    // The responses name no replica; the worker column comes from the proxy.
    let csv = std::fs::read_to_string(r.run_dir.join("requests.csv")).expect("requests.csv");
    let mut rd = csv::Reader::from_reader(csv.as_bytes());
    let col = rd
        .headers()
        .expect("header")
        .iter()
        .position(|h| h == "worker")
        .expect("worker column");
    let workers: Vec<String> = rd
        .records()
        .map(|x| x.expect("row")[col].to_string())
        .collect();
    assert!(!workers.is_empty());
    assert!(workers.iter().all(|w| w == "a" || w == "b"), "{workers:?}");
}

/// Probe points fire on the replica that served the probe, found by its marker alone:
/// a kill after the probe's first delta, and one while the proxy holds it at prefill.
/// The gateway's own upstream header (`x-upstream: http://127.0.0.1:<port>`) maps to
/// the replica whose proxy listens there (`evidence.worker_header`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_points_fire_on_the_serving_replica_behind_a_gateway_without_headers() {
    for point in ["first_delta", "prefill"] {
        let bed = bed(&format!("probe-{point}"), false).await;
        let text = bed.scenario(
            "  - {name: baseline, duration: 1s}\n  - {name: fault, duration: 3s}",
            &format!(
                "  - {{name: kill-{point}, domain: worker, action: kill, at: {{phase: fault, offset: 500ms}}, when: {{probe: {point}}}}}\n"
            ),
        );
        let sets = ["evidence.worker_header=x-upstream"];
        let r = run(plan_text(&text, &sets), &format!("probe-{point}")).await;
        let evs = events(&r);
        // The gateway names its upstream by URL: each response names the replica
        // whose proxy that URL is, the one the proxy saw serve it.
        let by_proxy: std::collections::BTreeMap<String, String> = legs(&evs)
            .into_iter()
            .filter_map(|(replica, id, _)| Some((id?, replica)))
            .collect();
        let mut named = 0;
        for e in &evs {
            if let Event::Response {
                id,
                worker: Some(w),
                ..
            } = e
            {
                assert_eq!(Some(w), by_proxy.get(id), "{point}: {id}");
                named += 1;
            }
        }
        assert!(named >= 4, "{point}: {named} responses named a replica");
        let probe = format!("probe-kill-{point}");
        let served: Vec<String> = legs(&evs)
            .into_iter()
            .filter(|(_, id, _)| id.as_deref() == Some(probe.as_str()))
            .map(|(replica, _, by)| {
                assert_eq!(by, Some(LegBy::Marker));
                replica
            })
            .collect();
        assert_eq!(served.len(), 1, "{point}: {served:?}");
        let fault = evs
            .iter()
            .find_map(|e| match e {
                Event::Fault(f @ FaultLine { .. }) => Some(f.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{point}: no fault line"));
        assert!(fault.verified, "{point}: {fault:?}");
        assert_eq!(fault.replica, served[0], "{point}: {fault:?}");
        let pid = if fault.replica == "a" {
            bed.a.p.pid
        } else {
            bed.b.p.pid
        };
        assert_eq!(fault.pid, Some(pid), "{point}");
        let fd = verdict(&r, "Failure-Domain");
        assert_eq!(fd.status, Status::Pass, "{point}: {fd:?}");
        // Routing with no header to go by: the gateway's round robin keeps sending
        // every other request to the killed replica, whose refused connects haq's
        // proxy sees (packet socket, CAP_NET_RAW: these tests run as root).
        let rt = verdict(&r, "Routing");
        assert_eq!(rt.status, Status::Fail, "{point}: {rt:?}");
        assert!(rt.summary.contains(&fault.replica), "{point}: {rt:?}");
    }
}
