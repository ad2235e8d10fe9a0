use serde::{Deserialize, Serialize};

pub use super::outcome::Outcome;
use crate::scenario::{FailureDomain, FaultAction, FaultBackend};
pub use crate::wire::kinds::{ChunkKind, InBandError, ToolCall, Usage};

/// The `source` of the observations of haq's readiness watch (`evidence.readiness_watch`).
pub const READINESS: &str = "haq readiness watch";

/// One line of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// First line: what ran, with which seed, when.
    RunStart {
        t: u64,
        name: String,
        seed: u64,
        /// Wall-clock start, RFC 3339 UTC.
        wall: String,
        /// CLOCK_MONOTONIC (ns) at t = 0, to place other processes' journals.
        mono_ns: u64,
        version: String,
        /// The run's token (8 hex digits): every request body carries the marker
        /// `haq-<token>-<request id>` (`client.marker`), by which haq's proxy tells this
        /// run's requests from anyone else's. Absent in older traces.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// The system under test as started or reached.
    Target {
        t: u64,
        url: String,
        replicas: Vec<ReplicaInfo>,
        /// Where the request markers go, when `client.marker: auto` learned it at
        /// the start (absent otherwise, and in older traces).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        marker: Option<MarkerUse>,
    },
    Phase {
        t: u64,
        name: String,
        edge: Edge,
    },
    /// A request was dispatched.
    Request {
        t: u64,
        id: String,
        class: String,
        phase: String,
        /// When the schedule wanted it sent (trace time, µs).
        intended: u64,
        prompt_tokens: u32,
        max_tokens: u32,
        protected: bool,
        /// Sent with `stream: true` (a non-streaming request's answer is one chunk).
        #[serde(default = "yes", skip_serializing_if = "is_true")]
        stream: bool,
        /// With a concurrency cap: when a slot was granted (trace time, µs). Schedule
        /// slip is measured from `max(intended, admitted)`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        admitted: Option<u64>,
        /// Multi-turn session and turn number (from 1).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
        /// Set on probe requests: the fault whose trigger this request drives.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        probe: Option<String>,
    },
    /// Status line and headers arrived.
    Response {
        t: u64,
        id: String,
        status: u16,
        /// Replica that served it, from the gateway's attribution header.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        worker: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<String>,
        /// Server-reported queue time (µs), where a header reports it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        queue_us: Option<u64>,
        /// Every response header as received, in order (Q2: a router's own headers
        /// are evidence too). Bounded: at most `client::MAX_HEADERS`, each name and
        /// value cut at `client::MAX_HEADER_BYTES` (marked with `…`).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        headers: Vec<(String, String)>,
        /// Headers left out beyond the bound.
        #[serde(default, skip_serializing_if = "is_zero")]
        headers_omitted: u32,
        /// The client's end of the TCP connection that carried the request
        /// (`127.0.0.1:51234`): requests with the same value shared one connection,
        /// and the first of them paid its handshake (which no server-side clock sees).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        conn: Option<String>,
    },
    /// One SSE event, stamped when its bytes arrived.
    Chunk {
        t: u64,
        id: String,
        /// Index of the event within the stream.
        n: u32,
        kind: ChunkKind,
        /// Text delivered by this event (content, reasoning or tool arguments).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// The `id` field of the chunk (one per generation attempt on most servers).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cid: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish: Option<String>,
        /// The raw `data:` payload for events that are not plain deltas (errors,
        /// usage, unknown shapes): evidence kept as sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw: Option<String>,
    },
    /// How the stream ended.
    End {
        t: u64,
        id: String,
        outcome: Outcome,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        /// Output tokens delivered (usage when reported, else counted deltas).
        tokens: u32,
        /// `[DONE]` was seen.
        done: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish: Option<String>,
        /// HTTP status, when a response arrived.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// Output deltas counted by the client (content, reasoning, tool-call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        counted: Option<u32>,
        /// The server's `usage`, when reported.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// The in-band error that ended the stream, read field by field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<InBandError>,
        /// Tool calls assembled from their deltas.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// For structured-output requests: the answer parses as JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        json_valid: Option<bool>,
    },
    /// A fault was injected on one replica, and how it was verified (one line per
    /// replica removed: a node fault writes one per replica of the node). A fault
    /// that never fired or did not take effect is written with `verified: false`.
    Fault(FaultLine),
    /// A fault was undone (and how the undo was verified).
    Heal {
        t: u64,
        name: String,
        detail: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        verified: Option<bool>,
    },
    /// A stage of a replica's replacement after a kill (Q11), as the backend saw it.
    Replacement {
        t: u64,
        /// The fault that removed the replica.
        fault: String,
        replica: String,
        stage: ReplacementStage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A process haq watched (a drained or replaced replica) exited.
    Exited {
        t: u64,
        replica: String,
        pid: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// The fault that caused it, when one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fault: Option<String>,
    },
    /// haq's proxy forwarded a request to a replica (attribution: Routing evidence).
    /// Inference requests (POST) only; health checks are not recorded. `t` is when its
    /// head arrived; the line is written once the body's marker was read (or the body
    /// ended without one).
    ProxyRequest {
        t: u64,
        replica: String,
        /// Connection number on this replica's proxy.
        conn: u64,
        /// The client's request id: from this run's marker in the body
        /// (`haq-<token>-<id>`), else from `x-request-id` as the gateway forwarded it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// How `id` was read (absent in older traces: the header).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<LegBy>,
        /// Why a request with no `id` could not be attributed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unattributed: Option<Unattributed>,
        /// `x-haq-attempt` (the gateway's attempt id), when sent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        method: String,
        path: String,
    },
    /// How a request forwarded by haq's proxy ended, as the proxy saw it.
    ProxyEnd {
        t: u64,
        replica: String,
        conn: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        attempt: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// SSE events the replica sent for it (counted at the proxy).
        events: u32,
        /// When the first event passed the proxy.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        first_event: Option<u64>,
        end: ProxyEndKind,
        /// Index (1-based) of the event haq held back and never delivered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        held: Option<u32>,
    },
    /// A connect attempt to a dead replica's path, seen by haq's proxy: traffic that
    /// reached a dead endpoint (Routing evidence).
    ProxyRefused {
        t: u64,
        replica: String,
        /// Who tried: the connecting (gateway's) end, `ip:port`.
        peer: String,
        how: RefusedHow,
    },
    /// haq's proxy ran out of a local resource (file descriptors, memory, socket
    /// buffers, local ports) accepting the gateway's connection or connecting to the
    /// replica: haq's failure, not the target's (the run is INVALID).
    ProxyLocal {
        t: u64,
        replica: String,
        /// The errno's C name (`EMFILE`).
        errno: String,
        /// `accept` or `connect`.
        during: String,
    },
    /// Whether haq's proxy sees the connect attempts its closed listeners refuse:
    /// written when the proxies start, and again if the watch stops.
    ProxyWatch {
        t: u64,
        watching: bool,
        detail: String,
    },
    /// haq's proxy closed its listener for a replica (the replica refuses connections,
    /// so the gateway's connects are refused by the kernel, as without haq), or opened
    /// it again (the replica listens again).
    ProxyListener {
        t: u64,
        replica: String,
        open: bool,
    },
    /// Something an observer saw (health checks, gateway journal, readiness).
    Observation {
        t: u64,
        source: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        replica: Option<String>,
        what: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// A replica engine's own metrics (its Prometheus `/metrics`, scraped while faults
    /// run: Q12 step 14), read into haq's names — `prefix_hits`, `prefix_queries`
    /// (tokens, counters), `prefix_hit_rate`, `kv_usage` (0–1), `running`, `waiting`,
    /// `prompt_tokens`, `generation_tokens` (counters) — whichever the engine has.
    EngineMetrics {
        t: u64,
        replica: String,
        /// `vllm` (also the sim), `sglang` or `llamacpp`: whose names were read.
        engine: String,
        m: std::collections::BTreeMap<String, f64>,
    },
    /// Connections opened to the target before load (`client.warm_connections`), as
    /// the client's connector counted them: they wait in the pool for the first requests.
    Warmed {
        t: u64,
        /// Connections asked for.
        wanted: u32,
        /// The client end (`ip:port`) of every connection opened.
        conns: Vec<String>,
        /// Warm-up requests of the last round that got no answer (refused, timed out).
        #[serde(default, skip_serializing_if = "is_zero")]
        failed: u32,
    },
    /// haq's own load at a phase edge (issue 19 item 4), counters since haq started:
    /// the dispatcher thread's CPU time, the time the run's runtime workers were busy,
    /// and the process's CPU time. Deltas between a phase's edges say whether haq's
    /// own client, not the target, was the limit of a capacity-search step.
    OwnLoad {
        t: u64,
        phase: String,
        edge: Edge,
        /// CPU time of the thread that sends the schedule (µs).
        dispatch_cpu_us: u64,
        /// Busy time summed over the runtime's worker threads (µs), and how many.
        busy_us: u64,
        workers: u32,
        /// CPU time of haq's whole process, every thread (µs).
        process_cpu_us: u64,
    },
    /// How the trace writer kept up with the run (written once, before `run_end`). Any
    /// wait for room in its bounded buffer makes the run INVALID (issue #4 item 5).
    TraceStats {
        t: u64,
        /// Emits that found the buffer full and waited for the writer.
        waits: u64,
        /// Time spent waiting, in all (µs).
        waited_us: u64,
        /// The longest single wait (µs).
        worst_us: u64,
        /// Most bytes the buffer held, and its bound.
        peak_bytes: u64,
        cap_bytes: u64,
        /// Lines written before this one.
        lines: u64,
    },
    /// Last line of a complete trace.
    RunEnd {
        t: u64,
        interrupted: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

impl Event {
    pub fn t(&self) -> u64 {
        match self {
            Event::RunStart { t, .. }
            | Event::Target { t, .. }
            | Event::Phase { t, .. }
            | Event::Request { t, .. }
            | Event::Response { t, .. }
            | Event::Chunk { t, .. }
            | Event::End { t, .. }
            | Event::Fault(FaultLine { t, .. })
            | Event::Heal { t, .. }
            | Event::Replacement { t, .. }
            | Event::Exited { t, .. }
            | Event::ProxyRequest { t, .. }
            | Event::ProxyEnd { t, .. }
            | Event::ProxyRefused { t, .. }
            | Event::ProxyLocal { t, .. }
            | Event::ProxyWatch { t, .. }
            | Event::ProxyListener { t, .. }
            | Event::Observation { t, .. }
            | Event::EngineMetrics { t, .. }
            | Event::Warmed { t, .. }
            | Event::OwnLoad { t, .. }
            | Event::TraceStats { t, .. }
            | Event::RunEnd { t, .. } => *t,
        }
    }
}

/// How haq's proxy tied an upstream request to its client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LegBy {
    /// This run's marker in the request body (`client.marker`).
    Marker,
    /// The `x-request-id` header the gateway forwarded.
    Header,
}

/// Why haq's proxy could not tie an upstream request to a client request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unattributed {
    /// The body was read to its end: no marker of this run, no `x-request-id` (another
    /// client's traffic, or `client.marker: none` behind a gateway that drops the header).
    NoMarker,
    /// Only markers of another run (another haq, an earlier run).
    OtherRun,
    /// A body longer than the scan cap (1 MiB) with no marker in its first 1 MiB.
    OverCap,
    /// The exchange ended before its body was read (or the body was not HTTP/1.1 framed).
    Unread,
    /// The proxy had no run token (bodies are not scanned).
    NoToken,
}

impl Unattributed {
    pub fn as_str(self) -> &'static str {
        match self {
            Unattributed::NoMarker => "no marker",
            Unattributed::OtherRun => "another run's marker",
            Unattributed::OverCap => "body over the scan cap",
            Unattributed::Unread => "body not read",
            Unattributed::NoToken => "no run token",
        }
    }
}

/// How the `detail` of a fault that was never applied begins: its trigger never
/// came, or haq could not tell where to apply it (a probe whose serving replica was
/// never known). Such a line has no pid and is not verified; nothing was removed.
pub const NOT_APPLIED: &str = "not applied: ";

/// One fault on one replica, as the trace records it (`"ev": "fault"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultLine {
    pub t: u64,
    pub name: String,
    /// The declared failure domain (Q3).
    pub domain: FailureDomain,
    pub action: FaultAction,
    pub replica: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub verified: bool,
    pub detail: String,
    /// The backend that applied it (absent in traces before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<FaultBackend>,
    /// The node the replica is declared on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// What fired it: `time`, or the probe point / load condition reached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<String>,
    /// When the trigger condition was met (before the fault was applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub triggered: Option<u64>,
    /// The probe request whose token loop fired it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplicaInfo {
    pub name: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// haq's proxy listen address in front of this replica, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy: Option<String>,
    /// The node the replica is declared on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// What `client.marker: auto` learned before the load: one small request per place,
/// in order, until haq's proxy read one upstream and the answer was a success.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkerUse {
    /// Where the run's markers went (`user`, `metadata`, `top_level`, `prompt`, `none`).
    pub field: String,
    /// Each place tried, in order.
    pub tried: Vec<MarkerTry>,
}

/// One place tried by `client.marker: auto`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarkerTry {
    pub field: String,
    /// haq's proxy read the marker from an upstream request (the gateway forwarded it).
    pub forwarded: bool,
    /// How the request ended (`completed`, `http_error`, …; `unanswered` when the
    /// calibration's time ran out first).
    pub outcome: String,
}

/// Q11 stages of a replacement that haq can see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReplacementStage {
    /// haq asked for the replacement (restart command or sim respawn issued).
    Requested,
    /// The replacement process exists (and listens, for the sim).
    ProcessStarted,
    /// Its readiness check passed.
    Ready,
    /// The first inference request through it was answered in full (seen by the proxy).
    FirstRequestServed,
    /// The replacement could not be started or never became ready (`detail` says why).
    Failed,
}

/// How an exchange ended at the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProxyEndKind {
    /// The whole response passed.
    Completed,
    /// The replica closed the connection mid-exchange (FIN).
    UpstreamClosed,
    /// The replica's connection was reset or failed mid-exchange.
    UpstreamReset,
    /// The replica could not be reached (connection refused or timed out).
    UpstreamRefused,
    /// The gateway closed the connection before the response ended (client gone).
    DownstreamClosed,
    /// The gateway's connection was reset.
    DownstreamReset,
    /// A proxy fault (reset/close rule) cut it.
    Cut,
    /// haq held part of it back (a probe point) and dropped it: the replica was
    /// removed before the gateway received what it had computed.
    HeldDropped,
    /// The proxy was stopped (end of run).
    Stopped,
    /// haq's proxy could not connect to the replica for want of a local resource
    /// (`proxy_local`): haq's failure, not the replica's.
    Local,
}

/// How a connect attempt to a dead replica's path was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusedHow {
    /// The kernel refused it (RST to the SYN): the proxy's listener was closed, the
    /// gateway's connect failed with ECONNREFUSED exactly as without haq.
    Refused,
    /// Accepted before the proxy knew the replica was dead; the replica refused the
    /// proxy's own connect and the proxy reset the gateway's connection at once,
    /// unread: the gateway saw a connection reset, not a refusal.
    Reset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Edge {
    Start,
    End,
}
