//! `client` timeouts and `report` outputs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::{Dur, Fraction};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCfg {
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Longest wait for the first event after the request was sent.
    #[serde(default = "default_first_token_timeout")]
    pub first_token_timeout: Dur,
    /// Longest silence between two events of a stream.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout: Dur,
    /// After the last phase, how long in-flight requests may take to finish.
    #[serde(default = "default_drain")]
    pub drain_timeout: Dur,
    /// A stall: the run is INVALID when any request is sent later than this after it
    /// was due. Default: the tightest latency objective (`slo.ttft_p95`,
    /// `slo.e2e_p95`), at most 1s — that request misses its objective on haq's lateness
    /// alone, and every time haq stamped meanwhile (deltas of every open stream, the
    /// failure timeline's instants) is off by as much. Same meaning as before issue
    /// 21, when the default was 50ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_late: Option<Dur>,
    /// The run is INVALID when taking haq's own send lateness out of a phase's
    /// latencies moves its p95 TTFT or E2E by more than this share of the objective
    /// (`slo.ttft_p95`, `slo.e2e_p95`): the verdict could then be haq's, not the
    /// service's.
    #[serde(default = "default_max_p95_shift")]
    pub max_p95_shift: Fraction,
    /// The run is INVALID when the requests haq sent during a phase (by dispatch
    /// time) differ from the requests due in it by more than this share of them (and
    /// by more than one request): the service was not offered the planned load.
    #[serde(default = "default_max_load_error")]
    pub max_load_error: Fraction,
    /// Removed in issue 21 (a p99 of slip over ~100 sends is one scheduler hiccup);
    /// read only to say what replaced it.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub max_slip_p99: Option<serde::de::IgnoredAny>,
    /// Connections to open before load starts (haq's own HTTP/1.1 client opens them
    /// itself; through reqwest, concurrent `GET {api}/models` counted by its
    /// connector; the trace's `warmed` line names them), so the first requests find a
    /// warm pool as a long-running production client would, instead of each paying a
    /// handshake. 0: start cold.
    #[serde(default)]
    pub warm_connections: u32,
    /// Which HTTP client sends the requests.
    #[serde(default)]
    pub transport: Transport,
    /// Where each request body carries its marker, `haq-<run token>-<request id>`,
    /// by which haq's proxy ties every upstream request to its client request when
    /// the gateway forwards no `x-request-id` (docs/evidence.md, Attribution).
    #[serde(default)]
    pub marker: MarkerField,
    /// How much one response may make haq hold (`line`, `event`, `body`, `stream`),
    /// how long its head and its tail after `[DONE]` may take (docs/evidence.md).
    #[serde(default)]
    pub limits: super::ResponseLimits,
}

/// Where the per-request marker goes in the body (`client.marker`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkerField {
    /// Learned at the start of the run: one small request per place (`user`, then
    /// `metadata`, `top_level`, `prompt`) with the marker there only; the first whose
    /// marker haq's proxy reads upstream and whose answer is a success is used (the
    /// gateway forwards it and the replica accepts it). The
    /// sim's gateway forwards `user`; with no proxy in the path nothing reads a
    /// marker and bodies carry none.
    #[default]
    Auto,
    /// The OpenAI `user` field (the answer does not depend on it; vllm-router forwards
    /// it, sglang-router and LiteLLM drop it).
    User,
    /// `metadata: {haq_request_id: …}` (vllm-router, sglang-router and nginx forward
    /// it; LiteLLM consumes it).
    Metadata,
    /// A top-level field of its own, `haq_marker` (LiteLLM, vllm-router and nginx
    /// forward it; sglang-router drops it; a strict server may refuse it).
    TopLevel,
    /// A short nonce appended to the last user message (chat) or the prompt
    /// (completions): it changes the prompt by a few tokens; the last resort for
    /// gateways that forward neither field.
    Prompt,
    /// No marker: legs are attributed by `x-request-id` only.
    None,
}

impl MarkerField {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkerField::Auto => "auto",
            MarkerField::User => "user",
            MarkerField::Metadata => "metadata",
            MarkerField::TopLevel => "top_level",
            MarkerField::Prompt => "prompt",
            MarkerField::None => "none",
        }
    }
}

/// The HTTP client requests go through (`client.transport`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// haq's own HTTP/1.1 client for `http://` targets (each SSE event read by the
    /// request's own task: one wake-up, no copy), reqwest (rustls) for `https://`.
    #[default]
    Auto,
    /// reqwest (hyper, rustls) for every target.
    Reqwest,
}

impl Transport {
    /// The name a scenario gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::Reqwest => "reqwest",
        }
    }
}

fn default_connect_timeout() -> Dur {
    Dur::secs(5)
}
fn default_first_token_timeout() -> Dur {
    Dur::secs(60)
}
fn default_idle_timeout() -> Dur {
    Dur::secs(30)
}
fn default_drain() -> Dur {
    Dur::secs(60)
}
fn default_max_p95_shift() -> Fraction {
    Fraction(0.10)
}
fn default_max_load_error() -> Fraction {
    Fraction(0.05)
}

impl ClientCfg {
    /// The stall bound in force: `max_late`, or the tightest latency objective (TTFT
    /// or E2E p95), at most 1 s.
    pub fn stall_bound(&self, slo: &super::Slo) -> std::time::Duration {
        self.max_late.map_or_else(
            || {
                let tightest = slo.ttft_p95.0.min(slo.e2e_p95.0);
                tightest.min(std::time::Duration::from_secs(1))
            },
            |d| d.0,
        )
    }
}

impl Default for ClientCfg {
    fn default() -> Self {
        ClientCfg {
            connect_timeout: default_connect_timeout(),
            first_token_timeout: default_first_token_timeout(),
            idle_timeout: default_idle_timeout(),
            drain_timeout: default_drain(),
            max_late: None,
            max_p95_shift: default_max_p95_shift(),
            max_load_error: default_max_load_error(),
            max_slip_p99: None,
            warm_connections: 0,
            transport: Transport::Auto,
            marker: MarkerField::Auto,
            limits: super::ResponseLimits::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportFormat {
    /// The summary printed at the end of the run.
    Terminal,
    /// report.json (schema: schemas/report.schema.json).
    Json,
    /// report.md: fits a CI step summary.
    Markdown,
    /// junit.xml: one testcase per verdict.
    Junit,
    /// report.html: self-contained, plots over time with fault/recovery markers.
    Html,
    /// requests.csv: one row per request.
    Csv,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportCfg {
    #[serde(default = "default_formats")]
    pub formats: Vec<ReportFormat>,
}

fn default_formats() -> Vec<ReportFormat> {
    vec![
        ReportFormat::Terminal,
        ReportFormat::Json,
        ReportFormat::Markdown,
        ReportFormat::Junit,
        ReportFormat::Html,
        ReportFormat::Csv,
    ]
}

impl Default for ReportCfg {
    fn default() -> Self {
        ReportCfg {
            formats: default_formats(),
        }
    }
}
