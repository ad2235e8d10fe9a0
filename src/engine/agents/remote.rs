//! An agent on another host (a pod of `agents.kubernetes`) talking to its coordinator's
//! endpoint: its assignment and the run's scenario, the clock exchange that puts its
//! stamps on the coordinator's trace time, and the return of its trace and result.
//!
//! The clock: [`SAMPLES`] exchanges over one kept-alive connection; the one with the
//! shortest round trip wins (NTP's minimum filter: queueing only ever adds delay), and
//! the coordinator's reading is taken to be of the middle of that round trip. The
//! agent's stamps are then within half that round trip of the coordinator's; its wall
//! clock's offset from the coordinator's is measured the same way, and reported.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};

use super::assignment::{self, AgentResult, Assignment, ClockReading};
use crate::trace::Clock;

/// Clock exchanges; the shortest round trip is kept.
const SAMPLES: usize = 16;
/// Between two exchanges.
const SPACING: Duration = Duration::from_millis(10);
/// How long an agent keeps trying to reach its coordinator at its start (a pod's
/// network may take a moment after the container starts) and to return its results.
const REACH: Duration = Duration::from_secs(20);
/// One small call's limit.
const CALL: Duration = Duration::from_secs(5);

/// The coordinator as an agent reaches it.
pub(super) struct Remote {
    http: reqwest::Client,
    url: String,
    key: String,
}

/// The agent's trace clock set by the exchange.
pub(super) struct Synced {
    pub clock: Clock,
    /// Its wall clock minus the coordinator's (µs).
    pub offset_us: i64,
    /// The round trip of the exchange kept (µs).
    pub rtt_us: u64,
}

impl Remote {
    pub fn new(url: &str, key: &str) -> anyhow::Result<Remote> {
        crate::wire::tls::install_crypto_provider();
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CALL)
            .tcp_nodelay(true)
            .build()?;
        Ok(Remote {
            http,
            url: url.trim_end_matches('/').to_string(),
            key: key.to_string(),
        })
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .timeout(CALL)
    }

    /// `GET path`, tried again until [`REACH`] has passed.
    async fn fetch(&self, path: &str) -> anyhow::Result<String> {
        let until = Instant::now() + REACH;
        loop {
            let r = async {
                let resp = self.get(path).send().await?.error_for_status()?;
                resp.text().await
            }
            .await;
            match r {
                Ok(t) => return Ok(t),
                Err(e) if Instant::now() < until && e.status().is_none() => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => bail!("GET {}{path}: {e}", self.url),
            }
        }
    }

    pub async fn assignment(&self, index: u64) -> anyhow::Result<Assignment> {
        let text = self.fetch(&format!("/agents/{index}/assignment")).await?;
        serde_json::from_str(&text).context("reading the assignment")
    }

    /// The run's effective scenario, as its `scenario.json` records it.
    pub async fn scenario(&self) -> anyhow::Result<serde_json::Value> {
        let text = self.fetch("/scenario").await?;
        serde_json::from_str(&text).context("reading the coordinator's scenario")
    }

    /// The clock exchange.
    pub async fn sync(&self) -> anyhow::Result<Synced> {
        let mut best: Option<(Duration, Instant, i64, ClockReading)> = None;
        for i in 0..SAMPLES {
            if i > 0 {
                tokio::time::sleep(SPACING).await;
            }
            let (t0, w0) = (Instant::now(), assignment::wall_ns());
            let resp = self.get("/clock").send().await?.error_for_status()?;
            let r: ClockReading = resp.json().await?;
            let (t1, w1) = (Instant::now(), assignment::wall_ns());
            let rtt = t1 - t0;
            let mid = t0 + rtt / 2;
            let wall_mid = w0 / 2 + w1 / 2;
            let offset_us = (wall_mid as i64 - r.wall_ns as i64) / 1000;
            if best.as_ref().is_none_or(|b| rtt < b.0) {
                best = Some((rtt, mid, offset_us, r));
            }
        }
        let (rtt, mid, offset_us, r) = best.ok_or_else(|| anyhow!("no clock exchange"))?;
        let clock = Clock::synced(r.t_us, mid).ok_or_else(|| {
            anyhow!("the coordinator's trace time is longer than this host has been up")
        })?;
        Ok(Synced {
            clock,
            offset_us,
            rtt_us: rtt.as_micros() as u64,
        })
    }

    /// `PUT path` with the body `body()` makes, tried again until [`REACH`] has
    /// passed when the coordinator could not be reached.
    async fn put(
        &self,
        path: &str,
        body: impl Fn() -> std::io::Result<reqwest::Body>,
    ) -> anyhow::Result<()> {
        let until = Instant::now() + REACH;
        loop {
            let r = self
                .http
                .put(format!("{}{path}", self.url))
                .bearer_auth(&self.key)
                .body(body()?)
                .send()
                .await
                .and_then(|r| r.error_for_status());
            match r {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() < until && e.status().is_none() => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) => bail!("PUT {}{path}: {e}", self.url),
            }
        }
    }

    /// Sends the agent's trace, streamed from its file.
    pub async fn send_trace(&self, index: u64, trace: &Path) -> anyhow::Result<()> {
        let open = || {
            let f = tokio::fs::File::from_std(std::fs::File::open(trace)?);
            Ok(reqwest::Body::wrap_stream(
                tokio_util::io::ReaderStream::new(f),
            ))
        };
        self.put(&format!("/agents/{index}/trace"), open).await
    }

    pub async fn send_result(&self, r: &AgentResult) -> anyhow::Result<()> {
        let text = serde_json::to_vec(r)?;
        self.put(&format!("/agents/{}/result", r.index), || {
            Ok(reqwest::Body::from(text.clone()))
        })
        .await
    }
}
