//! The request headers of every request haq sends to the target (`target.headers`).

use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::plan::Plan;

/// The scenario's `target.headers` as a header map (a bad name or value is an error).
pub fn request_headers(plan: &Plan) -> anyhow::Result<HeaderMap> {
    let mut h = HeaderMap::new();
    for (k, v) in &plan.scenario.target.headers {
        h.insert(
            HeaderName::from_bytes(k.as_bytes())
                .with_context(|| format!("target.headers: bad name {k:?}"))?,
            HeaderValue::from_str(v).with_context(|| format!("target.headers.{k}: bad value"))?,
        );
    }
    Ok(h)
}
