//! The HTTP clients a request goes through ([`Http`]: haq's own HTTP/1.1 client or
//! reqwest) and the response either gives ([`Resp`]), read in two steps so the
//! arrival of bytes is stamped before they are parsed; and how a failed send is
//! classified.

use std::time::Duration;

use bytes::Bytes;
use reqwest::header::HeaderMap;
use tokio::time::Instant;

use super::bounds::Limits;
use super::call::Call;
use super::{conns, h1};
use crate::trace::{Outcome, local_detail};
use crate::wire::io::{chain_text, io_kind, local_errno};

/// Builds the HTTP client all requests share: rustls (ring), no proxies, no retries.
pub fn http_client(
    connect_timeout: Duration,
    headers: &HeaderMap,
) -> reqwest::Result<reqwest::Client> {
    builder(connect_timeout, headers).build()
}

/// The HTTP clients requests go through: haq's own HTTP/1.1 client ([`h1`]) for
/// `http://` URLs unless `client.transport: reqwest`, reqwest (rustls) for the rest.
/// reqwest's connections are counted into a [`conns::ConnLog`] (the warm-up's
/// attestation). Clones share the pools.
#[derive(Clone)]
pub struct Http {
    pub(super) reqwest: reqwest::Client,
    h1: Option<h1::Client>,
    pub(super) log: conns::ConnLog,
    /// What one response may make the client hold (`client.limits`).
    pub(super) limits: Limits,
}

impl Http {
    pub fn new(
        connect_timeout: Duration,
        headers: &HeaderMap,
        transport: crate::scenario::Transport,
    ) -> reqwest::Result<Http> {
        let log = conns::ConnLog::default();
        Ok(Http {
            reqwest: builder(connect_timeout, headers)
                .connector_layer(log.clone())
                .build()?,
            h1: (transport == crate::scenario::Transport::Auto)
                .then(|| h1::Client::new(connect_timeout, headers)),
            log,
            limits: Limits::default(),
        })
    }

    /// With `client.limits` (the defaults otherwise).
    pub fn with_limits(mut self, limits: impl Into<Limits>) -> Http {
        self.limits = limits.into();
        self
    }

    /// The HTTP/1.1 client when it serves `url`: plain `http://` without credentials
    /// in the URL (reqwest turns those into a basic-auth header).
    pub(super) fn h1_for(&self, url: &str) -> Option<&h1::Client> {
        let rest = url.strip_prefix("http://")?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        self.h1.as_ref().filter(|_| !authority.contains('@'))
    }

    pub(super) async fn send(&self, call: &Call) -> Result<Resp, SendFail> {
        if let Some(h1) = self.h1_for(&call.url) {
            let fixed = [
                ("content-type", "application/json"),
                ("accept", "text/event-stream"),
                ("accept-encoding", "identity"),
                ("x-request-id", call.id.as_str()),
            ];
            let req = h1::Request {
                method: "POST",
                url: &call.url,
                headers: &call.headers,
                fixed: &fixed,
                body: &call.body,
                head_timeout: self.limits.head_timeout,
            };
            return h1.send(&req).await.map(Resp::H1).map_err(SendFail::H1);
        }
        let mut req = self
            .reqwest
            .post(&call.url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .header("accept-encoding", "identity")
            .header("x-request-id", &call.id)
            .body(call.body.clone());
        for (k, v) in &call.headers {
            req = req.header(k, v);
        }
        req.send()
            .await
            .map(|r| Resp::Reqwest(r, None))
            .map_err(SendFail::Reqwest)
    }
}

/// Why a request got no response head.
pub(super) enum SendFail {
    Reqwest(reqwest::Error),
    H1(h1::SendError),
}

impl SendFail {
    fn error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            SendFail::Reqwest(e) => e,
            SendFail::H1(e) => e,
        }
    }

    pub(super) fn outcome(&self) -> Outcome {
        match self {
            SendFail::Reqwest(e) => classify_send_error(e),
            SendFail::H1(e) if local_errno(e).is_some() => Outcome::Local,
            SendFail::H1(e) => match (e.connect, e.head, e.err.kind()) {
                (true, _, std::io::ErrorKind::TimedOut) => Outcome::ConnectTimeout,
                (true, _, _) => Outcome::Refused,
                (false, true, _) => Outcome::BadHead,
                (false, false, _) => Outcome::Reset,
            },
        }
    }

    /// The error in words; for a `local` end, with its errno and haq's open-file limit
    /// first ([`local_detail`]).
    pub(super) fn text(&self) -> String {
        let text = chain_text(self.error());
        match local_errno(self.error()) {
            Some(l) => local_detail(l, crate::wire::fds::fd_limit(), &text),
            None => text,
        }
    }
}

pub(super) type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A response whose head is in, from either client. Its body is read in two steps:
/// [`Resp::fill`] waits for bytes, [`Resp::drain`] hands them out (the arrival is
/// stamped in between, before any parsing).
pub(super) enum Resp {
    /// The chunk read and not yet drained.
    Reqwest(reqwest::Response, Option<Bytes>),
    H1(h1::Response),
}

impl Resp {
    pub(super) fn status(&self) -> u16 {
        match self {
            Resp::Reqwest(r, _) => r.status().as_u16(),
            Resp::H1(r) => r.status,
        }
    }

    pub(super) fn headers(&self) -> &HeaderMap {
        match self {
            Resp::Reqwest(r, _) => r.headers(),
            Resp::H1(r) => &r.headers,
        }
    }

    /// The client end of the connection (`ip:port`).
    pub(super) fn conn(&self) -> Option<String> {
        match self {
            Resp::Reqwest(r, _) => r
                .extensions()
                .get::<hyper_util::client::legacy::connect::HttpInfo>()
                .map(|i| i.local_addr().to_string()),
            Resp::H1(r) => r.local.map(|a| a.to_string()),
        }
    }

    /// `true` when body bytes are ready to drain, `false` at the end of the body.
    pub(super) async fn fill(&mut self) -> Result<bool, BodyError> {
        match self {
            Resp::Reqwest(_, Some(_)) => Ok(true),
            Resp::Reqwest(r, pending) => {
                *pending = r.chunk().await?;
                Ok(pending.is_some())
            }
            Resp::H1(r) => Ok(r.fill().await?),
        }
    }

    pub(super) fn drain(&mut self, mut out: impl FnMut(&[u8])) -> Result<(), BodyError> {
        match self {
            Resp::Reqwest(_, pending) => {
                if let Some(b) = pending.take() {
                    out(&b);
                }
                Ok(())
            }
            Resp::H1(r) => Ok(r.drain(out)?),
        }
    }

    /// The rest of the body, up to `max` bytes, read until `deadline`: `Err(None)`
    /// when the deadline came first.
    pub(super) async fn read_to(
        &mut self,
        max: usize,
        deadline: Instant,
    ) -> Result<Vec<u8>, Option<BodyError>> {
        let mut buf = Vec::new();
        while buf.len() < max {
            match tokio::time::timeout_at(deadline, self.fill()).await {
                Err(_) => return Err(None),
                Ok(Err(e)) => return Err(Some(e)),
                Ok(Ok(false)) => break,
                Ok(Ok(true)) => self.drain(|b| buf.extend_from_slice(b)).map_err(Some)?,
            }
        }
        buf.truncate(max);
        Ok(buf)
    }
}

fn builder(connect_timeout: Duration, headers: &HeaderMap) -> reqwest::ClientBuilder {
    crate::wire::tls::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .pool_idle_timeout(Duration::from_secs(30))
        .no_proxy()
        .tcp_nodelay(true)
        .default_headers(headers.clone())
}

/// Classifies a failed send (before any response): haq's own host out of a resource
/// first (`local`), a head hyper would not parse (`bad_head`), then what the peer did.
pub fn classify_send_error(e: &reqwest::Error) -> Outcome {
    use std::io::ErrorKind::*;
    if local_errno(e).is_some() {
        return Outcome::Local;
    }
    if bad_head(e) {
        return Outcome::BadHead;
    }
    match io_kind(e) {
        Some(ConnectionRefused) => Outcome::Refused,
        Some(TimedOut) => Outcome::ConnectTimeout,
        _ if e.is_timeout() && e.is_connect() => Outcome::ConnectTimeout,
        _ if e.is_connect() => Outcome::Refused,
        _ => Outcome::Reset,
    }
}

/// hyper refused the response head (too large, too many headers, not HTTP).
fn bad_head(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            return h.is_parse() || h.is_parse_too_large();
        }
        cur = err.source();
    }
    false
}
