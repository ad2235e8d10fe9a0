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

/// One address the daemon holds: its spec (the upstream may change: a kubernetes
/// replica's pod replaced) and the proxy serving it while no run borrows it.
pub struct Held {
    pub name: String,
    /// The control socket runs borrow the address through.
    pub control: PathBuf,
    spec: Mutex<ProxySpec>,
    current: Mutex<Option<ProxySet>>,
}

impl Held {
    /// The address it holds.
    pub fn listen(&self) -> std::net::SocketAddr {
        lock(&self.spec).listen
    }

    /// The upstream it forwards to now.
    pub fn upstream(&self) -> Option<String> {
        lock(&self.spec).upstream.clone()
    }

    /// Forwards new connections to `up` (now, and once a run gives the address back).
    pub fn set_upstream(&self, up: &str) {
        lock(&self.spec).upstream = Some(up.to_string());
        if let Some(p) = lock(&self.current).as_ref() {
            for r in &p.replicas {
                r.set_upstream(up);
            }
        }
    }
}

/// Binds every address and its control socket (all or nothing), then serves them
/// in their own threads until the process ends; `say` is told when a run borrows an
/// address and when it gives it back.
pub fn start(
    specs: &[ProxySpec],
    say: Arc<dyn Fn(String) + Send + Sync>,
) -> anyhow::Result<Vec<Arc<Held>>> {
    let dir = handover::dir();
    let mut bound = Vec::new();
    for s in specs {
        let master = bind(s)?;
        let lender = Lender::bind(&dir, s.listen)?;
        bound.push((s.clone(), master, lender));
    }
    let mut out = Vec::new();
    for (s, master, lender) in bound {
        let held = Arc::new(Held {
            name: s.name.clone(),
            control: handover::control_path(&dir, s.listen),
            current: Mutex::new(serve_here(&s, &master)),
            spec: Mutex::new(s),
        });
        out.push(held.clone());
        let say = say.clone();
        std::thread::Builder::new()
            .name(format!("haq-proxyd-{}", held.name))
            .spawn(move || {
                lender.serve(master.as_raw_fd(), |lent| {
                    let s = lock(&held.spec).clone();
                    if lent {
                        // Its connections close with it: a router's pooled connection
                        // reconnects, to the run's proxy.
                        if let Some(p) = lock(&held.current).take() {
                            p.stop();
                        }
                        say(format!("{} ({}): lent to a haq run", s.listen, s.name));
                    } else {
                        *lock(&held.current) = serve_here(&s, &master);
                        say(format!(
                            "{} ({}): back, served by haq proxy",
                            s.listen, s.name
                        ));
                    }
                });
            })?;
    }
    Ok(out)
}
