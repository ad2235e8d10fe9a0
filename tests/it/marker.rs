//! `client.marker: auto` (issue 21 item 1): before the load, haq learns where in the
//! body this gateway lets its marker through. Two sim workers, each behind haq's proxy,
//! in front of them the independent test gateway (`testgw`) — here set to drop body
//! fields the way real routers do (sglang-router drops `user`, LiteLLM consumes
//! `metadata`). The calibration's own `x-request-id` never names its marker, so only
//! the body can tell.

use haq::trace::{Event, LegBy, MarkerUse};
use serde_json::json;

use crate::simkit::{Proc, free_port, host_port, worker_in};
use crate::support::{events, plan_text, run, scratch};
use crate::testgw::{self, Policy};

struct Bed {
    a: Proc,
    b: Proc,
    listens: [u16; 2],
    gw: testgw::TestGw,
}

/// `through_proxies`: the gateway's upstreams are haq's listen addresses (else the
/// workers themselves: haq's proxies are in nobody's path).
async fn bed(name: &str, policy: Policy, through_proxies: bool) -> Bed {
    let dir = scratch(name);
    let a = worker_in(&dir, "a", json!({}), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", json!({}), None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let ups: Vec<String> = if through_proxies {
        listens.iter().map(|p| format!("127.0.0.1:{p}")).collect()
    } else {
        vec![host_port(a.url()), host_port(b.url())]
    };
    let gw = testgw::start(&ups, policy).await;
    Bed { a, b, listens, gw }
}

impl Bed {
    fn scenario(&self) -> String {
        format!(
            r#"name: marker-auto
target:
  kind: url
  url: {gw}
  replicas:
    - {{name: a, upstream: "{ua}", listen: "127.0.0.1:{la}"}}
    - {{name: b, upstream: "{ub}", listen: "127.0.0.1:{lb}"}}
workload:
  seed: 5
  mix:
    classes: [{{name: chat, prompt_tokens: 40, output_tokens: 8}}]
  arrival: {{process: constant, rate: 4/s}}
protected_load: 4/s
slo: {{ttft_p95: 5s, itl_p95: 1s, e2e_p95: 30s, error_rate_max: 10%}}
client: {{max_late: 3s}}
phases:
  - {{name: baseline, duration: 2s}}
faults: []
"#,
            gw = self.gw.url,
            ua = host_port(self.a.url()),
            ub = host_port(self.b.url()),
            la = self.listens[0],
            lb = self.listens[1],
        )
    }
}

/// The judgement's `haq's proxy` evidence line.
fn proxy_evidence(r: &haq::RunResult) -> String {
    r.judgement
        .evidence
        .iter()
        .find(|s| s.source == "haq's proxy")
        .map(|s| s.detail.clone())
        .unwrap_or_default()
}

fn learned(evs: &[Event]) -> Option<MarkerUse> {
    evs.iter().find_map(|e| match e {
        Event::Target { marker, .. } => marker.clone(),
        _ => None,
    })
}

/// Upstream requests of the load (not the calibration's): (id, by).
fn load_legs(evs: &[Event]) -> Vec<(Option<String>, Option<LegBy>)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::ProxyRequest { id, by, .. }
                if !id.as_deref().is_some_and(|i| i.starts_with("calibrate-")) =>
            {
                Some((id.clone(), *by))
            }
            _ => None,
        })
        .collect()
}

/// A gateway that drops `user` and `metadata`: haq tries them, sees neither upstream,
/// and puts its markers in a top-level field of their own, by which every upstream
/// request of the load is tied to its client request; the report says so. Told
/// `client.marker: user`, haq learns nothing and the same gateway leaves every leg
/// tied by header only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_finds_the_field_the_gateway_forwards() {
    let policy = Policy {
        drops: &["user", "metadata"],
        ..Policy::default()
    };
    let bed = bed("marker-auto", policy, true).await;
    let r = run(plan_text(&bed.scenario(), &[]), "marker-auto").await;
    let evs = events(&r);
    let m = learned(&evs).expect("auto learned a place");
    assert_eq!(m.field, "top_level", "{m:?}");
    let tried: Vec<(&str, bool, &str)> = m
        .tried
        .iter()
        .map(|t| (t.field.as_str(), t.forwarded, t.outcome.as_str()))
        .collect();
    assert_eq!(
        tried,
        [
            ("user", false, "completed"),
            ("metadata", false, "completed"),
            ("top_level", true, "completed")
        ]
    );
    let legs = load_legs(&evs);
    assert!(legs.len() >= 6, "{legs:?}");
    assert!(
        legs.iter()
            .all(|(id, by)| id.is_some() && *by == Some(LegBy::Marker)),
        "{legs:?}"
    );
    let line = proxy_evidence(&r);
    assert!(
        line.contains(
            "markers in `top_level` (learned at the start: not forwarded in user, metadata)"
        ) && line.contains("3 of the marker calibration")
            && line.contains(" 0 of unknown requests"),
        "{line}"
    );

    let r = run(
        plan_text(&bed.scenario(), &["client.marker=user"]),
        "marker-user",
    )
    .await;
    let evs = events(&r);
    assert_eq!(learned(&evs), None);
    let legs = load_legs(&evs);
    assert!(!legs.is_empty());
    assert!(
        legs.iter().all(|(_, by)| *by == Some(LegBy::Header)),
        "{legs:?}"
    );
}

/// A gateway that does not send through haq's proxies: no calibration request reaches
/// one, so haq says markers cannot be read and puts none in the bodies (the load's
/// answers were fine: nothing else is wrong).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_says_when_no_marker_reaches_a_proxy() {
    let bed = bed("marker-bypass", Policy::default(), false).await;
    let r = run(plan_text(&bed.scenario(), &[]), "marker-bypass").await;
    let evs = events(&r);
    let m = learned(&evs).expect("auto tried");
    assert_eq!(m.field, "none", "{m:?}");
    assert_eq!(m.tried.len(), 4, "{m:?}");
    assert!(
        m.tried
            .iter()
            .all(|t| !t.forwarded && t.outcome == "completed")
    );
    assert!(load_legs(&evs).is_empty());
}
