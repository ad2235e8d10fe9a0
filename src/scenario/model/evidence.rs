//! `evidence`: where the Request-Fate checker finds evidence beyond the client's own
//! chunk trace (M10), for targets that are not the sim.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::units::Dur;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceCfg {
    /// Response header naming the attempt that produced the stream (the sim gateway
    /// sends `x-haq-attempt: <request id>/a<N>`).
    #[serde(default = "default_attempt_header")]
    pub attempt_header: String,
    /// Response header naming the replica that served the stream.
    #[serde(default = "default_worker_header")]
    pub worker_header: String,
    /// The tool service's execution log (JSON lines, schema in docs/evidence.md): a file
    /// path or an `http(s)://` URL. Copied into the run directory as `tools.jsonl` at the
    /// end of the run, so `haq check` needs no network. The sim writes it there itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_log: Option<String>,
    /// How long the gateway may take to cancel the upstream attempt after the client
    /// went away before that is a finding (M4).
    #[serde(default = "default_cancel_grace")]
    pub cancel_grace: Dur,
    /// Poll each replica's readiness path directly at this interval during the load
    /// and record every change as an observation (`haq readiness watch`): detection and
    /// readiness in the timeline for targets without a gateway journal (Q11). Off by
    /// default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_watch: Option<Dur>,
}

fn default_attempt_header() -> String {
    crate::wire::headers::ATTEMPT_HEADER.into()
}
fn default_worker_header() -> String {
    crate::wire::headers::WORKER_HEADER.into()
}
fn default_cancel_grace() -> Dur {
    Dur::secs(2)
}

impl Default for EvidenceCfg {
    fn default() -> Self {
        EvidenceCfg {
            attempt_header: default_attempt_header(),
            worker_header: default_worker_header(),
            tool_log: None,
            cancel_grace: default_cancel_grace(),
            readiness_watch: None,
        }
    }
}
