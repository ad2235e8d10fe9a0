//! Tool calls (M7, M9 case 5). When the engine has decoded a tool call's arguments, the
//! call is executed at the tool service (`haq sim tools`) with the idempotency key
//! `<prefix>:<tool_call_id>` — the prefix is the logical request id unless the gateway
//! sends `x-haq-tool-key` — and only then streamed to the client as `delta.tool_calls`
//! with finish_reason `tool_calls`. The `after_tool_call` hook fires between the two.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::api::Fmt;
use super::faults::{Faults, Point};
use super::out::Out;
use super::publish::publish_event;

/// A decoded tool call waiting for execution.
pub struct ToolWork {
    pub out: Arc<Out>,
    pub fmt: Fmt,
    pub stream: bool,
    pub key_prefix: Option<String>,
    pub call_id: String,
    pub name: String,
    pub args: String,
    pub completion: u32,
}

pub struct ToolExec {
    pub worker: String,
    pub url: Option<String>,
    pub http: reqwest::Client,
    pub faults: Arc<Faults>,
}

impl ToolExec {
    /// Runs the executor: one task per tool call.
    pub async fn serve(self: Arc<Self>, mut rx: tokio::sync::mpsc::UnboundedReceiver<ToolWork>) {
        while let Some(w) = rx.recv().await {
            tokio::spawn(self.clone().run(w));
        }
    }

    async fn execute(&self, w: &ToolWork) -> Result<(), String> {
        let Some(url) = &self.url else {
            return Ok(()); // no tool service configured: the call is only streamed
        };
        let rid = &w.out.rid;
        let key = format!("{}:{}", w.key_prefix.as_deref().unwrap_or(rid), w.call_id);
        let body = json!({
            "logical_request_id": rid,
            "tool_call_id": w.call_id,
            "idempotency_key": key,
            "tool": w.name,
            "arguments": w.args,
            "attempt": w.out.attempt,
            "worker": self.worker,
        });
        let r = self
            .http
            .post(format!("{url}/v1/tools/execute"))
            .json(&body)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| format!("tool service: {e}"))?;
        if !r.status().is_success() {
            return Err(format!("tool service: HTTP {}", r.status()));
        }
        r.bytes().await.map_err(|e| format!("tool service: {e}"))?;
        Ok(())
    }

    async fn run(self: Arc<Self>, w: ToolWork) {
        if !w.out.live() {
            return;
        }
        if let Err(e) = self.execute(&w).await {
            eprintln!(
                "haq sim worker {}: {e}; ending {} without an answer",
                self.worker, w.out.rid
            );
            w.out.close();
            return;
        }
        if let Some(a) = self.faults.take(Point::AfterToolCall, 0, &w.out.rid) {
            self.faults.fire(&a, &w.out.rid, w.out.attempt.as_deref());
        }
        if !w.stream {
            let _ = w.out.push(
                w.fmt.tool_whole(&w.call_id, &w.name, &w.args, w.completion),
                None,
            );
            w.out.close();
            return;
        }
        for (k, b) in w
            .fmt
            .tool_events(&w.call_id, &w.name, &w.args, 8)
            .into_iter()
            .enumerate()
        {
            if publish_event(&self.faults, &w.out, k as u32, b, None).is_err() {
                return;
            }
        }
        for b in w.fmt.tail("tool_calls", w.completion) {
            if w.out.push(b, None).is_err() {
                return;
            }
        }
        w.out.close();
    }
}
