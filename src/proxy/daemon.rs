//! `haq proxy`: haq's proxies kept up between runs (issue 21 item 8). Each listen
//! address is bound once and served by a plain proxy (the same relay, with the same
//! dead-replica refusal, recording nothing); a `haq run` borrows the listening socket
//! for its run ([`super::handover`]), and the daemon serves it again once the run
//! gives it back. Routers that only start once their upstreams answer (vllm-router,
//! sglang-router) can so be started against haq's listen addresses before any run.

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::handover::{self, Lender};
use super::{ProxySet, ProxySpec, bind, lock};
use crate::trace::{Clock, TraceWriter};

/// The daemon's proxy for one address, from its own copy of the socket.
fn serve_here(s: &ProxySpec, master: &std::net::TcpListener) -> Option<ProxySet> {
    let l = master.try_clone().ok()?;
    let sink = TraceWriter::sink();
    match ProxySet::from_listeners(std::slice::from_ref(s), vec![l], &sink, &Clock::start()) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("haq proxy: {}: {e:#}", s.listen);
            None
        }
    }
}

/// Binds every address and its control socket (all or nothing), then serves them
/// in their own threads until the process ends; `say` is told when a run borrows an
/// address and when it gives it back. Returns the control sockets' paths.
pub fn start(
    specs: &[ProxySpec],
    say: Arc<dyn Fn(String) + Send + Sync>,
) -> anyhow::Result<Vec<PathBuf>> {
    let dir = handover::dir();
    let mut bound = Vec::new();
    for s in specs {
        let master = bind(s)?;
        let lender = Lender::bind(&dir, s.listen)?;
        bound.push((s.clone(), master, lender));
    }
    let paths = specs
        .iter()
        .map(|s| handover::control_path(&dir, s.listen))
        .collect();
    for (s, master, lender) in bound {
        let say = say.clone();
        std::thread::Builder::new()
            .name(format!("haq-proxyd-{}", s.name))
            .spawn(move || {
                let current = Mutex::new(serve_here(&s, &master));
                lender.serve(master.as_raw_fd(), |lent| {
                    if lent {
                        // Its connections close with it: a router's pooled connection
                        // reconnects, to the run's proxy.
                        if let Some(p) = lock(&current).take() {
                            p.stop();
                        }
                        say(format!("{} ({}): lent to a haq run", s.listen, s.name));
                    } else {
                        *lock(&current) = serve_here(&s, &master);
                        say(format!(
                            "{} ({}): back, served by haq proxy",
                            s.listen, s.name
                        ));
                    }
                });
            })?;
    }
    Ok(paths)
}
