//! Routing from haq's own vantage point (issue 21): behind gateways with no journal,
//! haq's proxy in front of each replica of a `url` target, one replica SIGKILLed by
//! the `process` backend. The proxy closes the dead replica's listener, so the
//! gateway's connects are refused by the kernel as without haq; each refusal is seen
//! (packet socket, CAP_NET_RAW: these tests run as root) and, when a client request
//! was looking for an upstream at that moment, counted as traffic routed to the dead
//! endpoint. A gateway that keeps routing there FAILs with the removal time; one that
//! takes it out PASSes, though its health checks keep knocking.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use haq::check::Status;
use haq::target::sim::SimProcess;
use haq::trace::{Event, RefusedHow};
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::simkit::{Proc, free_port, host_port, worker_in};
use crate::support::{events, haq_bin, plan_text, read_request_as_sent, run, scratch, verdict};

/// Two sim workers started as external servers, and the proxy ports the gateway uses.
pub struct Bed {
    pub a: Proc,
    pub b: Proc,
    pub listens: [u16; 2],
    pub dir: std::path::PathBuf,
}

pub async fn bed(name: &str) -> Bed {
    let dir = scratch(name);
    let a = worker_in(&dir, "a", json!({}), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", json!({}), None, "127.0.0.1:0").await;
    Bed {
        a,
        b,
        listens: [free_port(), free_port()],
        dir,
    }
}

impl Bed {
    /// Where the gateway sends: haq's listen addresses, or (no proxy) the workers.
    pub fn upstreams(&self, proxy: bool) -> [String; 2] {
        if proxy {
            self.listens.map(|p| format!("127.0.0.1:{p}"))
        } else {
            [host_port(self.a.url()), host_port(self.b.url())]
        }
    }

    /// The scenario: the gateway at `gw`, replicas a and b (with haq's proxy when
    /// `proxy`), b SIGKILLed `offset` into the fault phase, constant arrivals at `rate`.
    /// The marker goes in `user`, so haq sends no calibration requests before the
    /// load (`client.marker: auto` does, behind proxies only): the gateway gets the
    /// same requests with and without haq's proxy.
    pub fn scenario(&self, gw: &str, proxy: bool, rate: &str, offset: &str, extra: &str) -> String {
        let listen = |i: usize| {
            if proxy {
                format!(", listen: 127.0.0.1:{}", self.listens[i])
            } else {
                String::new()
            }
        };
        format!(
            r#"name: routing-behind-a-gateway
target:
  kind: url
  url: {gw}/v1
  replicas:
    - {{name: a, upstream: "{ua}"{la}, process: {{pid: {pa}, ready_path: /ready}}}}
    - {{name: b, upstream: "{ub}"{lb}, process: {{pid: {pb}, ready_path: /ready}}}}
workload:
  seed: 7
  mix:
    classes: [{{name: chat, prompt_tokens: 100, output_tokens: 8}}]
  arrival: {{process: constant, rate: {rate}}}
protected_load: {rate}
slo: {{ttft_p95: 10s, itl_p95: 2s, e2e_p95: 60s, error_rate_max: 100%, rejection_rate_max: 100%}}
client: {{max_late: 3s, marker: user}}
phases:
  - {{name: baseline, duration: 2s}}
  - {{name: fault, duration: 5s}}
faults:
  - {{name: kill-b, domain: worker, action: kill, target: {{replica: b}}, at: {{phase: fault, offset: {offset}}}}}
{extra}"#,
            ua = host_port(self.a.url()),
            ub = host_port(self.b.url()),
            la = listen(0),
            lb = listen(1),
            pa = self.a.p.pid,
            pb = self.b.p.pid,
        )
    }
}

/// An independent gateway with no health checks: round robin over `ups`, one
/// connection per request; an upstream that refuses gets the client a 502.
async fn round_robin(ups: Vec<String>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let up = ups[next.fetch_add(1, Ordering::Relaxed) % ups.len()].clone();
            tokio::spawn(relay_one(s, up));
        }
    });
    addr
}

/// One request to `up`, its answer relayed back; `connection: close` upstream, so
/// the answer ends with the connection (and says so to the client).
async fn relay_one(mut s: TcpStream, up: String) {
    let Some((head, body)) = read_request_as_sent(&mut s, &mut Vec::new()).await else {
        return;
    };
    let Ok(mut u) = TcpStream::connect(&up).await else {
        let msg = r#"{"error":{"message":"upstream connect error: connection refused"}}"#;
        let answer = format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{msg}",
            msg.len()
        );
        let _ = s.write_all(answer.as_bytes()).await;
        return;
    };
    let mut lines: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    lines.push("connection: close");
    let out = format!("{}\r\n\r\n", lines.join("\r\n"));
    if u.write_all(out.as_bytes()).await.is_err() || u.write_all(&body).await.is_err() {
        return;
    }
    let (mut ur, mut sw) = (u, s);
    let _ = tokio::io::copy(&mut ur, &mut sw).await;
    let _ = sw.shutdown().await;
}

/// The sim gateway with `config`, started as an external server in front of `ups`.
async fn sim_gateway(bed: &Bed, config: serde_json::Value) -> SimProcess {
    let ups = bed.upstreams(true);
    let args: Vec<String> = vec![
        "sim".into(),
        "gateway".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--config".into(),
        config.to_string(),
        "--upstream".into(),
        format!("a=http://{}", ups[0]),
        "--upstream".into(),
        format!("b=http://{}", ups[1]),
    ];
    SimProcess::start(&haq_bin(), "gateway", &args, &bed.dir)
        .await
        .expect("gateway")
}

fn refusals(evs: &[Event], replica: &str) -> usize {
    evs.iter()
        .filter(|e| matches!(e, Event::ProxyRefused { replica: r, how: RefusedHow::Refused, .. } if r == replica))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_that_keep_routing_to_a_dead_replica_fail_routing_from_the_refused_connects() {
    // An independent round-robin gateway with no health checks (a 502 for each
    // request it sends to the dead b), then the sim gateway's `no-health-check`
    // policy (it retries on a: every client request succeeds). No journal either way.
    for which in ["round-robin", "sim no-health-check"] {
        let bed = bed(&format!("routing-{}", which.replace(' ', "-"))).await;
        let (url, _gw) = if which == "round-robin" {
            let addr = round_robin(bed.upstreams(true).to_vec()).await;
            (format!("http://{addr}"), None)
        } else {
            let g = sim_gateway(&bed, json!({"policy": "no-health-check"})).await;
            (g.url.clone(), Some(g))
        };
        let text = bed.scenario(
            &url,
            true,
            "6/s",
            "500ms",
            "criteria: {routing: {traffic_removal_max: 2s}}\n",
        );
        let r = run(plan_text(&text, &[]), "routing-keeps").await;
        let evs = events(&r);
        let v = verdict(&r, "Routing");
        assert_eq!(v.status, Status::Fail, "{which}: {v:?}");
        let f = r.judgement.timeline.fault("kill-b").expect("timeline");
        let removal = f.removal.as_ref().expect("removal");
        // Half the requests of 4.5 s at 6/s went to b: each a connect refused while
        // its request looked for an upstream; the last near the end of load.
        assert!(removal.refused_connects >= 5, "{which}: {removal:?}");
        assert!(removal.t - f.injected > 3_000_000, "{which}: {removal:?}");
        assert_eq!(
            removal.last.as_ref().map(|m| m.source.as_str()),
            Some("haq proxy")
        );
        assert!(
            refusals(&evs, "b") as u64 >= removal.refused_connects,
            "{which}"
        );
        assert!(
            evs.iter()
                .any(|e| matches!(e, Event::ProxyWatch { watching: true, .. })),
            "{which}: the watch runs as root"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_takes_the_dead_replica_out_passes_though_its_health_checks_knock() {
    // The sim gateway's reference policy: the first failure (or health check) takes
    // b out; its health checks of b go on every 300 ms, each refused at haq's
    // listener while no client request is looking for an upstream: not traffic.
    let bed = bed("routing-reference").await;
    let g = sim_gateway(&bed, json!({"health_interval": "300ms"})).await;
    let text = bed.scenario(
        &g.url,
        true,
        "6/s",
        "500ms",
        "criteria: {routing: {traffic_removal_max: 2s}}\n",
    );
    let r = run(plan_text(&text, &[]), "routing-removes").await;
    let v = verdict(&r, "Routing");
    assert_eq!(v.status, Status::Pass, "{v:?}");
    let f = r.judgement.timeline.fault("kill-b").expect("timeline");
    let removal = f.removal.as_ref().expect("removal");
    assert!(removal.t - f.injected < 2_000_000, "{removal:?}");
    assert!(
        removal.probe_connects >= 3,
        "health checks were refused too: {removal:?}"
    );
    assert!(refusals(&events(&r), "b") >= 3);
}
