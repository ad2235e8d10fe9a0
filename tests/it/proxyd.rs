//! `haq proxy` keeps the listen addresses up between runs (issue 21 item 8): a gateway
//! started against them finds its upstreams answering before any run; each `haq run`
//! borrows the very listening sockets (it could not bind them: the daemon holds them)
//! and its proxies see the load; after the run the daemon serves them again, and the
//! next run borrows them again.

use std::process::Stdio;
use std::time::Duration;

use haq::trace::{Event, LegBy};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use crate::simkit::{eventually, free_port, host_port, http, worker_in};
use crate::support::{haq_bin, root, scratch};
use crate::testgw::{self, Policy};

fn read(trace: &std::path::Path) -> Vec<Event> {
    std::fs::read_to_string(trace)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `haq run` of scenario `f` into `run_dir`, borrowing from the daemon at `ctl`.
async fn haq_run(
    f: &std::path::Path,
    run_dir: &std::path::Path,
    ctl: &std::path::Path,
) -> std::process::Output {
    let done = tokio::process::Command::new(haq_bin())
        .args(["run", "--quiet", "--out"])
        .arg(run_dir)
        .arg(f)
        .env("HAQ_PROXY_DIR", ctl)
        .current_dir(root())
        .output();
    tokio::time::timeout(Duration::from_secs(120), done)
        .await
        .expect("the run ends")
        .expect("haq run")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_borrow_the_listen_addresses_haq_proxy_keeps_up() {
    let dir = scratch("proxyd");
    let ctl = dir.join("ctl");
    let a = worker_in(&dir, "a", json!({}), None, "127.0.0.1:0").await;
    let b = worker_in(&dir, "b", json!({}), None, "127.0.0.1:0").await;
    let listens = [free_port(), free_port()];
    let ups: Vec<String> = listens.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    // Health checks every 200 ms: the gateway's pooled connections to the daemon are
    // open when a run borrows the addresses.
    let gw = testgw::start(
        &ups,
        Policy {
            health: Some(Duration::from_millis(200)),
            ..Policy::default()
        },
    )
    .await;
    let f = dir.join("s.yaml");
    std::fs::write(
        &f,
        format!(
            r#"name: proxyd
target:
  kind: url
  url: {gw}
  replicas:
    - {{name: a, upstream: "{ua}", listen: "127.0.0.1:{la}"}}
    - {{name: b, upstream: "{ub}", listen: "127.0.0.1:{lb}"}}
workload:
  seed: 3
  mix:
    classes: [{{name: chat, prompt_tokens: 30, output_tokens: 8}}]
  arrival: {{process: constant, rate: 4/s}}
protected_load: 4/s
slo: {{ttft_p95: 5s, itl_p95: 1s, e2e_p95: 30s, error_rate_max: 10%}}
client: {{max_late: 3s}}
phases: [{{name: baseline, duration: 2s}}]
faults: []
"#,
            gw = gw.url,
            ua = host_port(a.url()),
            ub = host_port(b.url()),
            la = listens[0],
            lb = listens[1],
        ),
    )
    .expect("scenario");
    let mut daemon = tokio::process::Command::new(haq_bin())
        .arg("proxy")
        .arg(&f)
        .env("HAQ_PROXY_DIR", &ctl)
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("haq proxy");
    let mut out = tokio::io::BufReader::new(daemon.stdout.take().expect("stdout")).lines();
    let serving = tokio::time::timeout(Duration::from_secs(30), async {
        while let Ok(Some(l)) = out.next_line().await {
            if l.contains("serving") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(serving, Ok(true)), "haq proxy did not start");
    let health = async |port: u16| {
        http()
            .get(format!("http://127.0.0.1:{port}/health"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
    };
    assert!(health(listens[0]).await, "the daemon relays before any run");
    for round in 1..=2 {
        let run_dir = dir.join(format!("run{round}"));
        let done = haq_run(&f, &run_dir, &ctl).await;
        assert_eq!(
            done.status.code(),
            Some(0),
            "round {round}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        let evs = read(&run_dir.join(haq::trace::TRACE_FILE));
        let sent = evs
            .iter()
            .filter(|e| matches!(e, Event::Request { .. }))
            .count();
        let legs = evs
            .iter()
            .filter(|e| {
                matches!(
                    e,
                    Event::ProxyRequest {
                        by: Some(LegBy::Marker),
                        id: Some(id),
                        ..
                    } if id.starts_with('r')
                )
            })
            .count();
        assert!(sent >= 6, "round {round}: {sent} requests");
        assert!(
            legs >= sent,
            "round {round}: the run's proxies saw {legs} of {sent} requests"
        );
        // Given back: the daemon serves the addresses again.
        eventually(
            "the daemon serves again",
            Duration::from_secs(20),
            async || health(listens[1]).await,
        )
        .await;
    }
    // A replica dead across a lend and its return: b is killed while the daemon
    // serves; the daemon refuses its address (as b does); a run borrows it, finds b
    // down, stops with one error and gives the address back; the daemon still refuses
    // — and relays again once b listens again on its port.
    let b_addr = host_port(b.url()).to_string();
    let mut b = b;
    b.p.kill_and_reap().await;
    let refused = async |port: u16| {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
    };
    // The gateway's health checks let the daemon find b dead and close its listener.
    eventually(
        "the daemon refuses the dead replica's address",
        Duration::from_secs(20),
        async || refused(listens[1]).await,
    )
    .await;
    let done = haq_run(&f, &dir.join("run-dead"), &ctl).await;
    let said = String::from_utf8_lossy(&done.stderr);
    assert_eq!(done.status.code(), Some(2), "{said}");
    assert!(
        said.contains("replica b: upstream") && said.contains("not reachable"),
        "{said}"
    );
    eventually(
        "the returned address still refuses while b is down",
        Duration::from_secs(20),
        async || refused(listens[1]).await,
    )
    .await;
    let _b2 = worker_in(&dir, "b", json!({}), None, &b_addr).await;
    eventually(
        "the daemon relays to b again",
        Duration::from_secs(30),
        async || health(listens[1]).await,
    )
    .await;
    assert!(health(listens[0]).await, "a was served throughout");
    let _ = daemon.start_kill();
    let err = daemon.wait_with_output().await.expect("daemon output");
    let said = String::from_utf8_lossy(&err.stderr);
    assert!(
        said.matches("lent to a haq run").count() >= 4 && said.contains("back, served"),
        "{said}"
    );
}
