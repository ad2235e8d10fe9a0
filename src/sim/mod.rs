//! The embedded simulated cluster: worker processes, a gateway and a tool service, all
//! on loopback. docs/sim.md describes the model, its defaults and the admin API.

pub mod config;
pub mod engine;
pub mod gateway;
pub mod journal;
pub mod text;
pub mod tools;
pub mod worker;

pub use crate::wire::{LISTEN_PREFIX, announce};

/// Serves `app` on `listener` with TCP_NODELAY on every accepted connection: an SSE
/// event is one small write, and without it Nagle's algorithm holds each write after
/// the first until the client's delayed ACK (up to 40 ms on Linux), which would add to
/// every TTFT and inter-token gap the sim models.
pub(crate) async fn serve_nodelay(
    listener: tokio::net::TcpListener,
    app: axum::Router,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await
}
