//! `client` timeouts and `report` outputs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Dur;

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
    /// The run is INVALID when haq's own schedule slip p99 exceeds this.
    #[serde(default = "default_max_slip_p99")]
    pub max_slip_p99: Dur,
    /// The run is INVALID when any request is sent later than this.
    #[serde(default = "default_max_late")]
    pub max_late: Dur,
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
}

/// Where the per-request marker goes in the body (`client.marker`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkerField {
    /// The OpenAI `user` field (forwarded by OpenAI-compatible gateways; the answer
    /// does not depend on it).
    #[default]
    User,
    /// `metadata: {haq_request_id: …}` (for gateways that set `user` themselves).
    Metadata,
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
            MarkerField::User => "user",
            MarkerField::Metadata => "metadata",
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
fn default_max_slip_p99() -> Dur {
    Dur::millis(5)
}
fn default_max_late() -> Dur {
    Dur::millis(50)
}

impl Default for ClientCfg {
    fn default() -> Self {
        ClientCfg {
            connect_timeout: default_connect_timeout(),
            first_token_timeout: default_first_token_timeout(),
            idle_timeout: default_idle_timeout(),
            drain_timeout: default_drain(),
            max_slip_p99: default_max_slip_p99(),
            max_late: default_max_late(),
            warm_connections: 0,
            transport: Transport::Auto,
            marker: MarkerField::User,
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
