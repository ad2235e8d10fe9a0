//! What is qualified: the embedded cluster haq starts ([`sim`]), the deployment it
//! reaches ([`url`]) or the pods of a Kubernetes cluster ([`kube`]), with haq's proxy
//! in front of each replica where it can be; the registry of the replicas and their
//! processes ([`registry`], [`procs`]), the way the target starts a replacement
//! ([`replace`]) and the watch of the replicas' own readiness ([`readiness`]).
//!
//! The seam for a new kind of target (docs/architecture.md): a [`Kind`] arm for what
//! it must stop at the end, a [`registry::Respawn`] arm for its replacements, and its
//! start in [`start`].

pub mod group;
pub mod kube;
pub mod procs;
pub mod readiness;
pub mod registry;
pub mod replace;
pub mod sim;
pub mod url;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use reqwest::header::HeaderMap;

use crate::plan::Plan;
use crate::proxy::{ProxySet, ProxySpec};
use crate::scenario::TargetKind;
use crate::trace::{Clock, ReplicaInfo, TraceWriter};
use registry::{ProcRef, Registry, Replica, Respawn, SimSpawner};
use sim::SimCluster;

/// The system under test while the run lasts.
pub struct Running {
    /// The OpenAI base URL the load goes to (`…/v1`).
    pub api_url: String,
    /// The replicas as the trace records them.
    pub replicas: Vec<ReplicaInfo>,
    /// haq's proxies in front of the replicas (every sim worker; `url` replicas with
    /// a `listen` address).
    pub proxies: Option<ProxySet>,
    pub registry: Arc<Registry>,
    /// Addresses of replacements the target learns while the run goes (a kubernetes
    /// replica's new pod, from the watches): the response attribution reads them.
    pub learned: Option<Arc<crate::client::Learned>>,
    kind: Kind,
}

/// What a target holds while it runs, to stop it at the end.
enum Kind {
    /// The embedded cluster: its processes, stopped in order.
    Sim(Box<SimCluster>),
    /// A deployment haq only reaches: nothing of it is haq's to stop.
    Url,
    /// A Kubernetes deployment: its EndpointSlice watch stops.
    Kube(tokio_util::sync::CancellationToken),
}

impl Running {
    /// The proxies stop relaying (the end of the load's observation).
    pub fn stop_proxies(&mut self) {
        if let Some(p) = self.proxies.take() {
            p.stop();
        }
    }

    /// Stops what haq started (the sim's processes); a `url` target is left running.
    pub async fn stop(mut self) {
        self.stop_proxies();
        match self.kind {
            Kind::Sim(sim) => sim.stop().await,
            Kind::Kube(watch) => watch.cancel(),
            Kind::Url => {}
        }
    }
}

fn replica_info(r: &Replica, pid: Option<u32>) -> ReplicaInfo {
    ReplicaInfo {
        name: r.name.clone(),
        url: r.direct_url().unwrap_or_default(),
        pid,
        proxy: r.proxy.as_ref().map(|p| p.listen.to_string()),
        node: r.node.clone(),
    }
}

/// Starts (sim) or reaches (url) the plan's target, with haq's proxies in front of its
/// replicas. `headers` go with the reachability check of a `url` target; `haq_bin` is
/// the executable sim processes start from (default: `$HAQ_BIN` or this one); `say`
/// tells the person watching what the start waits for.
pub async fn start(
    plan: &Plan,
    haq_bin: Option<&Path>,
    headers: &HeaderMap,
    dir: &Path,
    tw: &TraceWriter,
    clock: &Clock,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Running> {
    match plan.scenario.target.kind {
        TargetKind::Sim => start_sim(plan, haq_bin, dir, tw, clock).await,
        TargetKind::Url => start_url(plan, headers, tw, clock, say).await,
        TargetKind::Kubernetes => start_kube(plan, tw, clock, headers, say).await,
    }
}

async fn start_sim(
    plan: &Plan,
    haq_bin: Option<&Path>,
    dir: &Path,
    tw: &TraceWriter,
    clock: &Clock,
) -> anyhow::Result<Running> {
    let t = &plan.scenario.target;
    let bin = match haq_bin {
        Some(b) => b.to_path_buf(),
        None => sim::haq_binary().context("locating the haq executable")?,
    };
    // One proxy per worker, between the gateway and the worker.
    let specs: Vec<ProxySpec> = plan
        .replica_decls
        .iter()
        .map(|d| ProxySpec {
            name: d.name.clone(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            upstream: None,
        })
        .collect();
    let proxies = ProxySet::start(&specs, tw, clock).await?;
    let via = |name: &str, url: &str| match proxies.get(name) {
        Some(p) => {
            p.set_upstream(url.trim_start_matches("http://"));
            format!("http://{}", p.listen)
        }
        None => url.to_string(),
    };
    let sim = SimCluster::start_via(t, &bin, dir, &via)
        .await
        .context("starting the sim cluster")?;
    let mut replicas = Vec::new();
    for (d, w) in plan.replica_decls.iter().zip(&sim.workers) {
        let (url, _) = {
            let g = w.lock().await;
            (g.url.clone(), g.pid)
        };
        replicas.push(Arc::new(Replica {
            name: d.name.clone(),
            node: d.node.clone(),
            process: std::sync::Mutex::new(Some(ProcRef::Sim(w.clone()))),
            proxy: proxies.get(&d.name).cloned(),
            direct_url: std::sync::RwLock::new(Some(url)),
            ready_path: "/ready".into(),
            restart_cmd: None,
        }));
    }
    let tools_url = sim.tools_url().to_string();
    let info = replicas
        .iter()
        .zip(&sim.info)
        .map(|(r, i)| replica_info(r, i.pid))
        .collect();
    Ok(Running {
        api_url: sim.api_url.clone(),
        replicas: info,
        kind: Kind::Sim(Box::new(sim)),
        proxies: Some(proxies),
        learned: None,
        registry: Arc::new(Registry {
            replicas,
            respawn: Respawn::Sim(Box::new(SimSpawner {
                target: t.clone(),
                tools_url,
                bin,
                dir: dir.to_path_buf(),
            })),
        }),
    })
}

async fn start_url(
    plan: &Plan,
    headers: &HeaderMap,
    tw: &TraceWriter,
    clock: &Clock,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Running> {
    let t = &plan.scenario.target;
    let url = t
        .url
        .clone()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();
    let (registry, proxies) = url::replicas(plan, tw, clock).await?;
    let http = crate::client::http_client(Duration::from_secs(5), headers)?;
    wait_ready(&http, &url, t.ready_timeout.0, say).await?;
    let replicas = registry
        .replicas
        .iter()
        .map(|r| {
            let pid = r.process().and_then(|p| procs::resolve(&p).ok());
            replica_info(r, pid)
        })
        .collect();
    Ok(Running {
        api_url: url,
        kind: Kind::Url,
        replicas,
        proxies,
        registry,
        learned: None,
    })
}

/// Discovers the pods of a kubernetes target, then waits for its gateway.
async fn start_kube(
    plan: &Plan,
    tw: &TraceWriter,
    clock: &Clock,
    headers: &HeaderMap,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Running> {
    let k = kube::start(plan, tw, clock, say).await?;
    let http = crate::client::http_client(Duration::from_secs(5), headers)?;
    if let Err(e) = wait_ready(&http, &k.api_url, plan.scenario.target.ready_timeout.0, say).await {
        k.stop.cancel();
        if let Some(p) = &k.proxies {
            p.stop();
        }
        return Err(e);
    }
    let replicas = k
        .registry
        .replicas
        .iter()
        .map(|r| replica_info(r, None))
        .collect();
    Ok(Running {
        api_url: k.api_url,
        kind: Kind::Kube(k.stop),
        replicas,
        proxies: k.proxies,
        registry: k.registry,
        learned: Some(k.learned),
    })
}

/// Waits until the gateway answers `GET {url}/models` — 2xx, or a 4xx that is an
/// answer (a gateway without a model list) — within `timeout`; refused connections,
/// timeouts and 5xx (no healthy upstream yet) are waited out. A 401/403 is an error at
/// once: the request headers (the API key) are wrong.
async fn wait_ready(
    http: &reqwest::Client,
    url: &str,
    timeout: Duration,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    let mut told = false;
    loop {
        let got = http
            .get(format!("{url}/models"))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let why = match got {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if matches!(r.status().as_u16(), 401 | 403) => anyhow::bail!(
                "target {url} answered {} to GET {url}/models: check target.headers (the API key)",
                r.status()
            ),
            Ok(r) if r.status().is_client_error() && !matches!(r.status().as_u16(), 408 | 429) => {
                return Ok(());
            }
            Ok(r) => format!("it answered {}", r.status()),
            Err(e) => crate::wire::io::chain_text(&e),
        };
        let waited = start.elapsed();
        if waited >= timeout {
            anyhow::bail!(
                "target {url} is not ready: no answer to GET {url}/models within {timeout:?} (target.ready_timeout); last: {why}"
            );
        }
        if !told && waited >= Duration::from_secs(1) {
            told = true;
            say(&format!(
                "waiting for the gateway at {url} (up to {timeout:?}): {why}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(250).min(timeout - waited)).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU16, Ordering};
    use std::time::Duration;

    use super::wait_ready;

    /// A gateway on `port` answering `GET /v1/models` with `status`.
    fn gateway(status: Arc<AtomicU16>) -> axum::Router {
        axum::Router::new().route(
            "/v1/models",
            axum::routing::get(move || {
                let s = status.load(Ordering::Relaxed);
                async move { axum::http::StatusCode::from_u16(s).unwrap_or_default() }
            }),
        )
    }

    fn client() -> reqwest::Client {
        crate::wire::tls::install_crypto_provider();
        crate::client::http_client(Duration::from_secs(2), &reqwest::header::HeaderMap::new())
            .expect("client")
    }

    /// A router that listens only once its replicas are healthy (vllm-router,
    /// sglang-router): haq waits for it, saying so, instead of giving up at once.
    #[tokio::test]
    async fn the_gateway_is_waited_for_until_it_answers() {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = probe.local_addr().expect("addr");
        drop(probe);
        let status = Arc::new(AtomicU16::new(503));
        let app = gateway(status.clone());
        let server = tokio::spawn(async move {
            // Not listening for the first 1.2 s, then "no healthy upstream", then ready.
            tokio::time::sleep(Duration::from_millis(1200)).await;
            let l = tokio::net::TcpListener::bind(addr).await.expect("rebind");
            let st = status.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                st.store(200, Ordering::Relaxed);
            });
            axum::serve(l, app).await
        });
        let said = std::sync::Mutex::new(Vec::new());
        let say = |s: &str| said.lock().expect("lock").push(s.to_string());
        let url = format!("http://{addr}/v1");
        wait_ready(&client(), &url, Duration::from_secs(20), &say)
            .await
            .expect("ready once it answers 200");
        let said = said.into_inner().expect("said");
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(said[0].contains("waiting for the gateway"), "{said:?}");
        server.abort();
    }

    #[tokio::test]
    async fn a_gateway_that_never_gets_ready_or_refuses_the_key_is_an_error() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        let status = Arc::new(AtomicU16::new(503));
        let server = tokio::spawn(axum::serve(l, gateway(status.clone())).into_future());
        let url = format!("http://{addr}/v1");
        let e = wait_ready(&client(), &url, Duration::from_millis(800), &|_| {})
            .await
            .expect_err("never ready");
        let e = e.to_string();
        assert!(e.contains("not ready") && e.contains("503"), "{e}");
        assert!(e.contains("target.ready_timeout"), "{e}");
        status.store(401, Ordering::Relaxed);
        let t = std::time::Instant::now();
        let e = wait_ready(&client(), &url, Duration::from_secs(30), &|_| {})
            .await
            .expect_err("unauthorized");
        assert!(e.to_string().contains("API key"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(10), "not waited out");
        // A gateway without a model list answers 404: it is up.
        status.store(404, Ordering::Relaxed);
        wait_ready(&client(), &url, Duration::from_secs(5), &|_| {})
            .await
            .expect("a 404 is an answer");
        server.abort();
    }
}
