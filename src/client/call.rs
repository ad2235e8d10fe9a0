//! One request to send ([`Call`]), the client's timeouts, what a per-request observer
//! is told, and what the engine learns live of a finished request ([`CallResult`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderName, HeaderValue};

pub use crate::scenario::Leave;
use crate::trace::Outcome;

/// Client timeouts. The first-token deadline runs from dispatch until the first
/// output delta (or an error or terminator); keep-alive comments do not extend it.
/// The idle timeout is the longest silence between data events after that.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub first_token: Duration,
    pub idle: Duration,
}

/// One request to send.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: String,
    pub url: String,
    pub body: Bytes,
    /// Extra request headers (priority class).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Structured-output request: check the answer parses as JSON.
    pub expect_json: bool,
    /// Response headers naming the serving replica and attempt, when a gateway uses
    /// others than [`WORKER_HEADER`](crate::wire::headers::WORKER_HEADER) and
    /// [`ATTEMPT_HEADER`](crate::wire::headers::ATTEMPT_HEADER) (`evidence.*_header`).
    pub attribution: Option<Arc<Attribution>>,
    /// Told of the response head and of delivered deltas (probe requests only).
    pub observe: Option<Observe>,
    /// The client leaves early (workload abandonment): it stops reading and closes
    /// its connection mid-stream, and the request ends `abandoned`.
    pub leave: Option<Leave>,
}

/// What a per-request observer is told, inline from the read loop.
#[derive(Debug, Clone, Copy)]
pub enum Seen<'a> {
    /// Status and the serving worker (`x-haq-worker`), when the head arrives.
    Head {
        status: u16,
        worker: Option<&'a str>,
    },
    /// The number of deltas delivered so far, after each read that brought some.
    Deltas(u32),
}

/// A per-request observer (the fault triggers of probe requests). It runs on the
/// request's read loop: it must be cheap and never block.
#[derive(Clone)]
pub struct Observe(pub Arc<dyn Fn(Seen<'_>) + Send + Sync>);

impl std::fmt::Debug for Observe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observe")
    }
}

/// Names of the attribution headers a gateway sends (Request-Fate and Routing evidence),
/// and how a worker header's value maps to a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    pub worker: String,
    pub attempt: String,
    /// Each replica's name with the addresses it is known by (`host:port` of haq's
    /// proxy for it and of the replica itself): a gateway that names its upstream by
    /// address or URL (`x-upstream: http://127.0.0.1:9101`) names that replica.
    pub replicas: Vec<(String, Vec<String>)>,
    /// Addresses learned while the run goes (a kubernetes replica's replacement pod).
    pub learned: Option<Arc<Learned>>,
}

/// Addresses that name a replica from when they are learned on (the pod a kubernetes
/// replica's replacement runs in, as the watches attribute it): a gateway naming the
/// replacement by its address names the replica.
#[derive(Debug, Default)]
pub struct Learned(std::sync::RwLock<Vec<(String, String)>>);

impl Learned {
    /// From now on `address` (`IP:PORT`) names `replica`.
    pub fn learn(&self, replica: &str, address: &str) {
        let mut g = self.0.write().unwrap_or_else(|e| e.into_inner());
        if !g.iter().any(|(r, a)| r == replica && a == address) {
            g.push((replica.to_string(), address.to_string()));
        }
    }

    /// The replica the address was last learned for.
    pub fn replica_of(&self, address: &str) -> Option<String> {
        let g = self.0.read().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .rev()
            .find(|(_, a)| a.eq_ignore_ascii_case(address))
            .map(|(r, _)| r.clone())
    }
}

/// One book of learned addresses is equal only to itself.
impl PartialEq for Learned {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

impl Eq for Learned {}

impl Attribution {
    /// The replica a worker header's value names: a replica's name as it is, else the
    /// replica whose proxy or own address the value names, else the value itself.
    pub fn replica<'a>(&'a self, value: &'a str) -> &'a str {
        if self.replicas.iter().any(|(n, _)| n == value) {
            return value;
        }
        let a = crate::wire::headers::authority(value);
        if let Some((n, _)) = self
            .replicas
            .iter()
            .find(|(_, addrs)| addrs.iter().any(|x| names(x, a)))
        {
            return n;
        }
        let learned = self.learned.as_ref().and_then(|l| l.replica_of(a));
        learned
            .and_then(|r| self.replicas.iter().find(|(n, _)| *n == r))
            .map_or(value, |(n, _)| n.as_str())
    }
}

/// Address `a` is `known`: the same, or `known` is haq's proxy listening on every
/// address of its host (`0.0.0.0:PORT`, in a pod) and `a` reaches that port (the
/// gateway names the proxy by its Service's address, whose port is the proxy's).
fn names(known: &str, a: &str) -> bool {
    if known.eq_ignore_ascii_case(a) {
        return true;
    }
    let any = known
        .strip_prefix("0.0.0.0:")
        .or_else(|| known.strip_prefix("[::]:"));
    any.is_some_and(|port| a.rsplit_once(':').is_some_and(|(_, p)| p == port))
}

impl Call {
    pub fn new(id: impl Into<String>, url: impl Into<String>, body: Bytes) -> Self {
        Call {
            id: id.into(),
            url: url.into(),
            body,
            headers: Vec::new(),
            expect_json: false,
            attribution: None,
            observe: None,
            leave: None,
        }
    }
}

/// What the engine needs to know live (the trace has everything else).
#[derive(Debug, Clone, Copy)]
pub struct CallResult {
    pub outcome: Outcome,
    /// When the request was sent (trace µs).
    pub dispatch_us: u64,
    /// When the first output delta arrived (trace µs).
    pub first_delta_us: Option<u64>,
    /// Time to first output delta, µs from dispatch.
    pub ttft_us: Option<u64>,
    pub e2e_us: u64,
    pub tokens: u32,
}

#[cfg(test)]
mod tests {
    use super::Attribution;

    /// A worker header names a replica by name, by its proxy's or its own address, or
    /// by a URL of either; anything else is kept as it is.
    #[test]
    fn worker_header_values_map_to_replicas_by_name_address_or_url() {
        let a = Attribution {
            worker: "x-upstream".into(),
            attempt: "x-attempt".into(),
            replicas: vec![
                (
                    "vllm-a".into(),
                    vec!["127.0.0.1:9101".into(), "10.0.0.11:8000".into()],
                ),
                ("vllm-b".into(), vec!["127.0.0.1:9102".into()]),
                // haq's proxy in a pod, reached through its Service.
                (
                    "w3".into(),
                    vec!["0.0.0.0:9003".into(), "10.0.0.13:8080".into()],
                ),
            ],
            learned: Some(Default::default()),
        };
        // w3's replacement pod, learned while the run goes.
        if let Some(l) = &a.learned {
            l.learn("w3", "10.0.0.23:8080");
        }
        for (v, want) in [
            ("10.96.0.40:9003", "w3"),
            ("http://10.0.0.23:8080", "w3"),
            ("10.96.0.40:9004", "10.96.0.40:9004"),
            ("vllm-b", "vllm-b"),
            ("http://127.0.0.1:9101", "vllm-a"),
            ("127.0.0.1:9102", "vllm-b"),
            ("http://10.0.0.11:8000/v1", "vllm-a"),
            ("http://10.0.0.99:8000", "http://10.0.0.99:8000"),
        ] {
            assert_eq!(a.replica(v), want, "{v}");
        }
    }
}
