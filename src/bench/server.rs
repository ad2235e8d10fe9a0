//! `haq bench server`: a fast OpenAI-style SSE server for the client benchmark. Each
//! content delta carries the CLOCK_MONOTONIC time (ns) at which the server handed it
//! to the HTTP layer (` t<ns>`), the first one also when the request arrived
//! (` r<ns>s<ns>`), so the client's trace gives the observation lag per event and the
//! TTFT against the server's truth. Events are shaped like vLLM's (about 230 bytes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::time::Instant;

use crate::wire::mono_ns;

/// What the stamping server streams: given to `haq bench client`, passed on to its
/// `haq bench server` child as the same flags.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct StreamShape {
    /// Tokens per answer (the request's `max_tokens` when smaller).
    #[arg(long, default_value_t = 200)]
    pub tokens: u32,
    /// Time between tokens of one stream.
    #[arg(long, default_value = "20ms", value_parser = crate::wire::units::parse_duration)]
    pub itl: Duration,
    /// Time before the first token.
    #[arg(long, default_value = "20ms", value_parser = crate::wire::units::parse_duration)]
    pub ttft: Duration,
    /// Emit every stream's token on a shared step clock (an engine's batch step), so
    /// all streams' events leave together; otherwise each stream keeps its own phase.
    #[arg(long)]
    pub sync: bool,
}

impl StreamShape {
    /// The same shape as command-line flags.
    pub fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--tokens".to_string(),
            self.tokens.to_string(),
            "--itl".into(),
            format!("{}us", self.itl.as_micros()),
            "--ttft".into(),
            format!("{}us", self.ttft.as_micros()),
        ];
        if self.sync {
            a.push("--sync".into());
        }
        a
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub shape: StreamShape,
}

struct St {
    cfg: ServerConfig,
    start: Instant,
    seq: std::sync::atomic::AtomicU64,
}

pub async fn serve(cfg: ServerConfig) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(cfg.listen).await?;
    crate::wire::announce(listener.local_addr()?);
    let st = Arc::new(St {
        cfg,
        start: Instant::now(),
        seq: Default::default(),
    });
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async { r#"{"object":"list","data":[{"id":"bench"}]}"# }),
        )
        .route("/v1/chat/completions", post(chat))
        .with_state(st);
    // TCP_NODELAY as real servers (uvicorn, hyper-based routers) set it: without it a
    // small event waits for the client's delayed ACK (Nagle), up to 40 ms.
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|s| {
        let _ = s.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

fn max_tokens(body: &[u8]) -> Option<u32> {
    #[derive(serde::Deserialize)]
    struct Req {
        max_tokens: Option<u32>,
    }
    serde_json::from_slice::<Req>(body).ok()?.max_tokens
}

struct Gen {
    id: u64,
    recv_ns: u64,
    i: u32,
    n: u32,
    next: Instant,
    st: Arc<St>,
    done: bool,
}

fn chunk(id: u64, content: &str, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    let delta = if content.is_empty() {
        "{}".to_string()
    } else {
        format!("{{\"content\":\"{content}\"}}")
    };
    format!(
        "data: {{\"id\":\"chatcmpl-bench-{id:08}\",\"object\":\"chat.completion.chunk\",\"created\":1795982190,\"model\":\"bench\",\"system_fingerprint\":null,\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
    )
}

impl Gen {
    /// The next step time: the stream's own phase, or the shared step clock.
    fn step(&self, after: Instant) -> Instant {
        if !self.st.cfg.shape.sync {
            return after;
        }
        let itl = self.st.cfg.shape.itl.as_nanos().max(1);
        let since = after.saturating_duration_since(self.st.start).as_nanos();
        let k = since.div_ceil(itl);
        self.st.start + Duration::from_nanos((k * itl) as u64)
    }

    async fn next_bytes(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let id = self.id;
        if self.i == 0 {
            let role = "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n".replace("chatcmpl-bench", &format!("chatcmpl-bench-{id:08}"));
            self.i = 1;
            return Some(Bytes::from(role));
        }
        if self.i <= self.n {
            tokio::time::sleep_until(self.next).await;
            let k = self.i;
            self.i += 1;
            self.next = self.step(self.next + self.st.cfg.shape.itl);
            let now = mono_ns();
            let text = if k == 1 {
                format!(" r{}s{now}", self.recv_ns)
            } else {
                format!(" t{now}")
            };
            return Some(Bytes::from(chunk(id, &text, None)));
        }
        self.done = true;
        let mut tail = chunk(id, "", Some("length"));
        tail.push_str(&format!(
            "data: {{\"id\":\"chatcmpl-bench-{id:08}\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{{\"prompt_tokens\":16,\"completion_tokens\":{},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
            self.n,
            self.n + 16
        ));
        Some(Bytes::from(tail))
    }
}

async fn chat(State(st): State<Arc<St>>, body: Bytes) -> Response {
    let recv_ns = mono_ns();
    let n = max_tokens(&body)
        .unwrap_or(st.cfg.shape.tokens)
        .min(st.cfg.shape.tokens)
        .max(1);
    let id = st.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut g = Gen {
        id,
        recv_ns,
        i: 0,
        n,
        next: Instant::now(),
        st: st.clone(),
        done: false,
    };
    g.next = g.step(Instant::now() + st.cfg.shape.ttft);
    let stream = futures_util::stream::unfold(g, |mut g| async move {
        g.next_bytes().await.map(|b| (Ok::<_, Infallible>(b), g))
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response())
}
