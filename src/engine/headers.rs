//! The request headers of every request haq sends to the target (`target.headers`),
//! with values read from the environment or files at the start of the run; every
//! credential among them is registered for redaction (`wire::redact`), so no file
//! haq writes holds it.

use anyhow::{Context, anyhow};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::plan::Plan;
use crate::scenario::HeaderSource;
use crate::wire::redact;

/// The scenario's `target.headers` as a header map: an unset variable, an unreadable
/// file, a bad name or value is an error naming the header (never its value).
pub fn request_headers(plan: &Plan) -> anyhow::Result<HeaderMap> {
    let mut h = HeaderMap::new();
    let mut secrets = Vec::new();
    for (k, src) in &plan.scenario.target.headers {
        let (value, secret) = resolve(k, src)?;
        if secret || redact::is_credential(k) {
            secrets.push(value.clone());
            // The bare key too, when it follows a prefix (`Bearer <key>`).
            if let Some((_, key)) = value.split_once(' ') {
                secrets.push(key.to_string());
            }
        }
        h.insert(
            HeaderName::from_bytes(k.as_bytes())
                .with_context(|| format!("target.headers: bad name {k:?}"))?,
            HeaderValue::from_str(&value)
                .map_err(|_| anyhow!("target.headers.{k}: not a valid header value"))?,
        );
    }
    redact::add(secrets);
    Ok(h)
}

/// A header's value; whether it came from the environment or a file.
fn resolve(name: &str, src: &HeaderSource) -> anyhow::Result<(String, bool)> {
    Ok(match src {
        HeaderSource::Value(v) => (v.clone(), false),
        HeaderSource::Env { env, prefix } => {
            let v = std::env::var(env).map_err(|_| {
                anyhow!("target.headers.{name}: environment variable {env} is not set")
            })?;
            (format!("{}{v}", prefix.as_deref().unwrap_or("")), true)
        }
        HeaderSource::File { file, prefix } => {
            let v = std::fs::read_to_string(file)
                .map_err(|e| anyhow!("target.headers.{name}: cannot read {file}: {e}"))?;
            let v = v.trim_end_matches(['\n', '\r']);
            (format!("{}{v}", prefix.as_deref().unwrap_or("")), true)
        }
    })
}
