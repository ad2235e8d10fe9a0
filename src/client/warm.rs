//! The warm-up: connections opened to the target before load (`client.warm_connections`),
//! so the first requests find a warm pool as a long-running production client would.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::transport::Http;

/// Rounds of warm-up requests at most: each round sends `n` at once, so every one
/// that finds no idle connection opens one.
const WARM_ROUNDS: u32 = 4;

/// What the warm-up opened.
pub struct Warm {
    /// Client end of every connection opened during the warm-up.
    pub conns: Vec<String>,
    /// Connections that could not be opened (haq's HTTP/1.1 client), or warm-up
    /// requests of the last round that got no answer (reqwest).
    pub failed: u32,
}

impl Http {
    /// Opens `n` keep-alive connections to the target before load, each bounded by
    /// `wait` (the connect timeout); stops early on `cancel`. haq's HTTP/1.1 client
    /// opens them itself and keeps them idle in its pool; through reqwest, see
    /// [`warm_reqwest`].
    pub async fn warm(
        &self,
        api_url: &str,
        n: u32,
        wait: Duration,
        cancel: &CancellationToken,
    ) -> Warm {
        let Some(h1) = self.h1_for(api_url) else {
            return warm_reqwest(&self.reqwest, &self.log, api_url, n, wait, cancel).await;
        };
        tokio::select! {
            (conns, failed) = h1.warm(api_url, n) => Warm { conns, failed },
            _ = cancel.cancelled() => Warm { conns: Vec::new(), failed: 0 },
        }
    }
}

/// Opens `n` keep-alive connections to the target before load. Each round sends `n`
/// concurrent `GET {api}/models` while the connector holds back every connection it
/// opens until `n` connects have begun (or half of `wait` passed): so no connection
/// can answer one warm-up request and be handed to the next, however fast the server
/// answers. The connector's log says how many connections there are; rounds go on
/// until it counts `n` or [`WARM_ROUNDS`] are spent. Every round and wait is bounded.
async fn warm_reqwest(
    http: &reqwest::Client,
    log: &super::conns::ConnLog,
    api_url: &str,
    n: u32,
    wait: Duration,
    cancel: &CancellationToken,
) -> Warm {
    let url = format!("{}/models", api_url.trim_end_matches('/'));
    let before = log.opened();
    log.record();
    let mut failed = 0;
    for _ in 0..WARM_ROUNDS {
        let missing = u64::from(n).saturating_sub(log.opened() - before);
        if missing == 0 {
            break;
        }
        // Connections that open wait for the rest: released when the missing ones have
        // all begun (the pool's idle ones serve the other requests), or after half the
        // connect timeout (the connect is timed with the wait).
        log.hold(missing, wait / 2);
        let sends = (0..n).map(|_| {
            let req = http.get(&url).send();
            async move {
                match tokio::time::timeout(wait, req).await {
                    Ok(Ok(resp)) => tokio::time::timeout(wait, resp.bytes()).await.is_ok(),
                    _ => false,
                }
            }
        });
        let answered = tokio::select! {
            a = futures_util::future::join_all(sends) => Some(a),
            _ = cancel.cancelled() => None,
        };
        log.release();
        let Some(answered) = answered else { break };
        failed = answered.iter().filter(|ok| !**ok).count() as u32;
        // Connects that lost the race to an idle connection finish into the pool.
        let settle = tokio::time::Instant::now() + wait;
        while log.pending() > 0 && tokio::time::Instant::now() < settle && !cancel.is_cancelled() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if failed == n {
            break;
        }
    }
    Warm {
        conns: log.take(),
        failed,
    }
}
