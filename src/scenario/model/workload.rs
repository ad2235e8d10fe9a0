//! `workload`: the request mix and its arrival process.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::wire::units::{Dur, Fraction, Rate};

/// The request mix and its arrival process.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Seed of every random choice (arrivals, classes, lengths). Same seed, same requests.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Request classes: inline, or a path to a workload file (relative to the scenario).
    pub mix: MixRef,
    #[serde(default)]
    pub arrival: Arrival,
    /// Cache truth (M6): plant identical prompts at temperature 0 among the requests —
    /// spread over the run, so across replicas, phases and faults; answers to one
    /// prompt that differ are a Request-Fate finding (`cache_divergence`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_truth: Option<CacheTruth>,
}

fn default_seed() -> u64 {
    1
}

/// Planted identical prompts (`workload.cache_truth`, M6): request `every`·k − 1 of the
/// schedule (k = 1, 2, …) is replaced by planted prompt k mod `prompts` — its arrival,
/// class (API, priority, streaming) and every other draw unchanged, its text fixed, at
/// temperature 0 with the workload's seed, no tools, no prefix, no session.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheTruth {
    /// One request in this many is planted.
    #[serde(default = "default_every")]
    pub every: u32,
    /// Distinct planted prompts.
    #[serde(default = "default_prompts")]
    pub prompts: u32,
    /// Length of each planted prompt (longer than a KV block, so repeats hit the
    /// prefix cache).
    #[serde(default = "default_canary_prompt")]
    pub prompt_tokens: u32,
    /// Output tokens asked of each.
    #[serde(default = "default_canary_output")]
    pub output_tokens: u32,
}

fn default_every() -> u32 {
    10
}
fn default_prompts() -> u32 {
    2
}
fn default_canary_prompt() -> u32 {
    96
}
fn default_canary_output() -> u32 {
    24
}

/// A mix written inline or the path of a `workloads/*.yaml` file holding one.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum MixRef {
    Inline(Mix),
    File(String),
}

impl<'de> Deserialize<'de> for MixRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // The loader inlines files before typed deserialization; both shapes stay
        // accepted so a recorded effective scenario reads back. The map is read by
        // the outer deserializer itself, so an error inside the mix keeps its path
        // (and its file:line:col).
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = MixRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a mix (a map with `classes`) or a workload file path")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<MixRef, E> {
                Ok(MixRef::File(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<MixRef, A::Error> {
                Mix::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(MixRef::Inline)
            }
        }
        d.deserialize_any(V)
    }
}

/// A request mix: weighted classes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mix {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub classes: Vec<RequestClass>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    #[default]
    Chat,
    Completions,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Counts toward the protected load: must be served through the fault.
    #[default]
    Protected,
    /// May be shed first under overload.
    BestEffort,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestClass {
    pub name: String,
    #[serde(default = "default_weight")]
    pub weight: f64,
    #[serde(default)]
    pub api: Api,
    /// Prompt length in tokens (the new user message of a session turn).
    pub prompt_tokens: Dist,
    /// Output length in tokens (sent as `max_tokens`).
    pub output_tokens: Dist,
    #[serde(default)]
    pub priority: Priority,
    /// Share of this class's requests sent with `stream: true` (default 100%).
    #[serde(default = "all", skip_serializing_if = "is_all")]
    pub stream: Fraction,
    /// Shared prompt prefixes (system prompts) for prefix-cache effects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prefix: Option<SharedPrefix>,
    /// Multi-turn sessions: each request continues a conversation with its history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionSpec>,
    /// Tool-call requests: `tools` definitions and `tool_choice` in the body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsSpec>,
    /// Structured output: `response_format`; the client checks the answer is JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Client abandonment (M4): a share of the class's streamed requests whose client
    /// leaves early and closes its connection mid-stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abandon: Option<Abandon>,
}

/// A share of a class's streamed requests whose client leaves early — before the
/// first token, after N deltas, or T after it sent the request — and closes its
/// connection mid-stream, as a user who closes the tab does. The trace records the
/// request as `abandoned` (the client's own leaving, never the target's failure);
/// Request-Fate then asks the gateway to cancel the upstream (M4). Exactly one of
/// `before_first_token`, `after_deltas` and `after`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Abandon {
    /// Share of the class's streamed requests that leave (e.g. `30%`), drawn from the
    /// seed per request.
    pub share: Fraction,
    /// Leave once the response head arrives, before reading any output.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_first_token: bool,
    /// Leave once this many output deltas have been read (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_deltas: Option<u32>,
    /// Leave this long after sending the request, if the answer has not ended by then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Dur>,
}

/// When a leaving client leaves (an [`Abandon`] resolved).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leave {
    /// When the response head arrives, before reading output.
    BeforeFirstToken,
    /// Once this many output deltas have been read.
    AfterDeltas(u32),
    /// This long after the request was sent.
    After(std::time::Duration),
}

impl Abandon {
    /// When the client leaves, if exactly one way is set (validation checks it).
    pub fn leave(&self) -> Option<Leave> {
        match (self.before_first_token, self.after_deltas, self.after) {
            (true, None, None) => Some(Leave::BeforeFirstToken),
            (false, Some(n), None) => Some(Leave::AfterDeltas(n)),
            (false, None, Some(d)) => Some(Leave::After(d.0)),
            _ => None,
        }
    }
}

impl Leave {
    /// How the trace says it, e.g. `after 2 deltas`.
    pub fn describe(&self) -> String {
        match self {
            Leave::BeforeFirstToken => "before the first token".into(),
            Leave::AfterDeltas(n) => format!("after {n} deltas"),
            Leave::After(d) => format!("{} after sending", Dur(*d)),
        }
    }
}

fn default_weight() -> f64 {
    1.0
}
fn all() -> Fraction {
    Fraction(1.0)
}
fn is_all(f: &Fraction) -> bool {
    f.0 >= 1.0
}

/// `groups` distinct system prompts of `tokens` tokens; each request uses one of them.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedPrefix {
    #[serde(default = "one")]
    pub groups: u32,
    /// Prefix length (drawn once per group).
    pub tokens: Dist,
}

fn one() -> u32 {
    1
}

/// Requests of the class continue one of `parallel` open conversations; a conversation
/// ends after `turns` turns and a new one opens. Earlier turns are replayed as history
/// (synthetic, deterministic assistant answers), so prompts grow turn by turn.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionSpec {
    pub turns: Dist,
    #[serde(default = "default_parallel")]
    pub parallel: u32,
}

fn default_parallel() -> u32 {
    8
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    #[default]
    Auto,
    Required,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolsSpec {
    /// How many tool definitions to send (1..=8).
    #[serde(default = "default_tools")]
    pub count: u32,
    #[serde(default)]
    pub choice: ToolChoice,
}

fn default_tools() -> u32 {
    2
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// `{"type": "json_object"}`
    JsonObject,
    /// `{"type": "json_schema", ...}` with a small fixed schema.
    JsonSchema,
}

/// A length distribution: a number (fixed) or one of `{uniform: [min, max]}`,
/// `{normal: {mean, stddev}}`, `{lognormal: {mean, stddev}}` (of the lengths, in
/// tokens), `{empirical: {file, column}}` (values drawn from a CSV column). Draws are
/// clamped to `[min, max]` (default 1 and the field's limit).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dist {
    Fixed(u32),
    Uniform([u32; 2]),
    Normal(Shape),
    Lognormal(Shape),
    Empirical(Empirical),
}

impl Dist {
    /// A typical length of the distribution (its middle, within its bounds); `None`
    /// for lengths read from a file (not known before the file is read).
    pub fn typical(&self) -> Option<u32> {
        match self {
            Dist::Fixed(n) => Some(*n),
            Dist::Uniform([a, b]) => Some(a / 2 + b / 2),
            Dist::Normal(s) | Dist::Lognormal(s) => {
                let m = s.mean.round().clamp(1.0, f64::from(u32::MAX)) as u32;
                Some(m.clamp(s.min.unwrap_or(1), s.max.unwrap_or(u32::MAX)))
            }
            Dist::Empirical(_) => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub mean: f64,
    pub stddev: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Empirical {
    /// CSV file with a header row (relative to the file that names it).
    pub file: String,
    /// Column to read; default the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

/// A length distribution written as a map (one key).
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum DistSpec {
    /// Always this many tokens.
    Fixed(u32),
    /// Uniform between `[min, max]`, both included.
    Uniform([u32; 2]),
    /// Normal, of the lengths in tokens.
    Normal(Shape),
    /// Lognormal: `mean` and `stddev` of the lengths in tokens (not of their log).
    Lognormal(Shape),
    /// Values drawn from a CSV column.
    Empirical(Empirical),
}

/// Written as a bare token count (`150`, what `Deserialize` reads first) or as one of
/// the maps of [`DistSpec`]: the schema says both (hand-written for that reason).
impl JsonSchema for Dist {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Dist".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let spec = g.subschema_for::<DistSpec>();
        schemars::json_schema!({
            "description": "A length in tokens: a number (fixed), or one of {fixed: N}, {uniform: [min, max]}, {normal: {mean, stddev, min, max}}, {lognormal: {mean, stddev, min, max}}, {empirical: {file, column}}. Draws are clamped to [min, max] (default 1 and the field's limit).",
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": u32::MAX},
                spec
            ]
        })
    }
}

impl<'de> Deserialize<'de> for Dist {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = serde_json::Value::deserialize(d)?;
        if let Some(n) = v.as_u64() {
            return u32::try_from(n)
                .map(Dist::Fixed)
                .map_err(|_| serde::de::Error::custom(format!("{n} is too large")));
        }
        let spec: DistSpec = serde_json::from_value(v.clone()).map_err(|e| {
            serde::de::Error::custom(format!(
                "expected a token count or one of {{fixed: N}}, {{uniform: [min, max]}}, {{normal: {{mean, stddev}}}}, {{lognormal: {{mean, stddev}}}}, {{empirical: {{file, column}}}}; got {v} ({e})"
            ))
        })?;
        Ok(match spec {
            DistSpec::Fixed(n) => Dist::Fixed(n),
            DistSpec::Uniform(r) => Dist::Uniform(r),
            DistSpec::Normal(s) => Dist::Normal(s),
            DistSpec::Lognormal(s) => Dist::Lognormal(s),
            DistSpec::Empirical(e) => Dist::Empirical(e),
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalProcess {
    /// Exponential inter-arrival times (open loop).
    #[default]
    Poisson,
    /// Evenly spaced arrivals.
    Constant,
    /// Gamma inter-arrival times: `burstiness` is the shape (1 = Poisson, < 1 burstier,
    /// > 1 smoother; the coefficient of variation is 1/sqrt(burstiness)).
    Gamma,
    /// Replay the arrival times and lengths of a recorded trace (`trace:`).
    Trace,
}

/// The arrival process and its rate profile. The rate is `rate`, or a `ramp`, or
/// `stages`; with none of them, `protected_load`. The schedule is computed ahead from
/// the seed (open loop): a slow server never delays the next send.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct Arrival {
    #[serde(default)]
    pub process: ArrivalProcess,
    /// Offered rate; defaults to `protected_load`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// Gamma shape (with `process: gamma`); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burstiness: Option<f64>,
    /// Rate rising (or falling) linearly from `from` to `to` over `over` (default: the
    /// whole run), then held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    /// Consecutive stages, each at a rate or ramping; the last rate holds to the end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
    /// The trace to replay (with `process: trace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceReplay>,
    /// Closed-loop cap: at most this many requests in flight; a request due while the
    /// cap is reached waits for a slot (its latency still counts from its intended time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Ramp {
    pub from: Rate,
    pub to: Rate,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over: Option<Dur>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    pub duration: Dur,
    /// Constant rate in this stage…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<Rate>,
    /// …or a linear ramp `[from, to]` across it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<[Rate; 2]>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum TraceFormat {
    /// Mooncake JSONL: `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`.
    #[default]
    Mooncake,
    /// CSV with a header: a timestamp column (`timestamp`/`TIMESTAMP`: milliseconds, or
    /// a date-time such as `2023-11-16 18:15:46.6805900`), input length
    /// (`input_length`/`ContextTokens`/`prompt_tokens`) and output length
    /// (`output_length`/`GeneratedTokens`/`output_tokens`).
    Csv,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceReplay {
    /// Relative to the file that names it.
    pub file: String,
    #[serde(default)]
    pub format: TraceFormat,
    /// Trace timestamps are multiplied by this: 0.5 replays twice as fast.
    #[serde(default = "unit_scale")]
    pub time_scale: f64,
    /// Start over when the trace ends before the run does.
    #[serde(default, rename = "loop")]
    pub repeat: bool,
}

fn unit_scale() -> f64 {
    1.0
}
