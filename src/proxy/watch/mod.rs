//! Connect attempts to a dead replica's path, seen without changing them (issue 21).
//!
//! A replica found dead has its proxy listener closed: the gateway's next connects are
//! refused by the kernel, exactly as they would be without haq in between (M4: dead is
//! not cut off). Those attempts never reach user space — yet each is traffic routed to
//! a dead endpoint, the evidence Routing needs. This watch sees them: a packet socket
//! with a classic BPF program ([`packet`]) that passes only the kernel's refusals (the
//! RST answering a SYN) sent from the proxies' listen ports, each recorded as
//! `proxy_refused {replica, peer, how: refused}`. Nothing is sent, nothing is delayed:
//! the gateway meets the same refusal, at the same time, as without haq.
//!
//! The socket is on the interface of the listen addresses: the loopback interface
//! when they all are loopback addresses (a local gateway), every interface otherwise (a
//! gateway on another host reaches them through its NIC). It needs CAP_NET_RAW; without
//! it the trace says so (`proxy_watch {watching: false}`) and Routing does not take the
//! proxy's silence for "no traffic". One task on the proxies' runtime reads it, woken
//! by the kernel (no polling), and ends with the proxies.
//!
//! Hand-written socket code, because no maintained crate does raw capture with a
//! kernel filter without a C library: `pcap` binds libpcap (a system library and its
//! headers to install), `pnet`'s datalink channel attaches no filter (every packet of
//! the interface would come to user space). socket2 (already under tokio) opens the
//! socket and attaches the program; the `unsafe` blocks left, each commented, fill the
//! link-layer address to bind to, ask the loopback interface's index and register
//! the socket with tokio's reactor.

mod packet;

use std::collections::VecDeque;
use std::io::Read;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, SockAddr, SockAddrStorage, SockFilter, Socket, Type};
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

use crate::trace::{Clock, Event, RefusedHow, TraceWriter};

/// A proxy listen address to watch, and the replica behind it.
pub(super) struct Watched {
    pub listen: SocketAddr,
    pub replica: String,
}

/// Refusals remembered to count each once (a packet seen on two stacked interfaces).
const RECENT: usize = 256;

/// Opens the watch and starts its task on `rt`; records in the trace whether connect
/// attempts to the closed listeners can be seen.
pub(super) fn start(
    rt: &tokio::runtime::Handle,
    watched: Vec<Watched>,
    trace: &TraceWriter,
    clock: Clock,
    stop: CancellationToken,
) {
    let loopback = watched.iter().all(|w| w.listen.ip().is_loopback());
    let ports: Vec<u16> = watched.iter().map(|w| w.listen.port()).collect();
    let opened = {
        let _in_rt = rt.enter();
        open(&ports, loopback).and_then(register)
    };
    let on = if loopback { "lo" } else { "every interface" };
    let (watching, detail) = match &opened {
        Ok(_) => (
            true,
            format!(
                "the kernel's refusals of connects to the proxies' closed listeners are seen (packet socket on {on})"
            ),
        ),
        Err(e) => (false, unobservable(e)),
    };
    if !watching {
        eprintln!(
            "haq: proxy: {detail}; Routing cannot tell from the proxy that traffic to a dead replica stopped"
        );
    }
    trace.emit(Event::ProxyWatch {
        t: clock.now_us(),
        watching,
        detail,
    });
    if let Ok(fd) = opened {
        let trace = trace.clone();
        rt.spawn(async move { read_loop(fd, watched, trace, clock, stop).await });
    }
}

/// The socket, registered with the proxies' reactor for reading.
fn register(s: Socket) -> std::io::Result<AsyncFd<Socket>> {
    // SAFETY: the socket owns its descriptor (an `OwnedFd` inside) and is moved into
    // the `AsyncFd`: it stays open, the same one, for as long as it is registered.
    unsafe { AsyncFd::register_with_interest(s, tokio::io::Interest::READABLE) }
        .map_err(std::io::Error::from)
}

fn unobservable(e: &std::io::Error) -> String {
    let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
        " (it needs CAP_NET_RAW)"
    } else {
        ""
    };
    format!(
        "connect attempts refused at a closed proxy listener cannot be seen: packet socket: {e}{hint}"
    )
}

/// A packet socket that receives only the refusals [`packet::program`] passes: the
/// program is attached before the socket is bound, so nothing else is ever queued.
fn open(ports: &[u16], loopback: bool) -> std::io::Result<Socket> {
    let all = (libc::ETH_P_ALL as u16).to_be();
    // Protocol 0: no packet is received until the bind names one.
    let s = Socket::new(Domain::PACKET, Type::DGRAM, Some(Protocol::from(0)))?;
    let prog: Vec<SockFilter> = packet::program(ports)
        .iter()
        .map(|i| SockFilter::new(i.code, i.jt, i.jf, i.k))
        .collect();
    s.attach_filter(&prog)?;
    let ifindex = if loopback { loopback_index()? } else { 0 };
    let mut st = SockAddrStorage::zeroed();
    // SAFETY: the storage is zeroed and larger than `sockaddr_ll`; the view ends
    // before `st` is moved.
    let ll = unsafe { st.view_as::<libc::sockaddr_ll>() };
    ll.sll_family = libc::AF_PACKET as u16;
    ll.sll_protocol = all;
    ll.sll_ifindex = ifindex;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `st` holds an initialised `sockaddr_ll` of `len` bytes.
    let addr = unsafe { SockAddr::new(st, len) };
    s.bind(&addr)?;
    s.set_recv_buffer_size(1 << 20)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

fn loopback_index() -> std::io::Result<i32> {
    // SAFETY: a NUL-terminated name; the call only reads it.
    match unsafe { libc::if_nametoindex(c"lo".as_ptr()) } {
        0 => Err(std::io::Error::last_os_error()),
        i => Ok(i as i32),
    }
}

/// Reads refusals until the proxies stop (or the socket fails, which the trace says).
async fn read_loop(
    fd: AsyncFd<Socket>,
    watched: Vec<Watched>,
    trace: TraceWriter,
    clock: Clock,
    stop: CancellationToken,
) {
    let mut buf = [0u8; packet::SNAP as usize];
    let mut recent: VecDeque<(SocketAddr, u32)> = VecDeque::with_capacity(RECENT);
    loop {
        let mut ready = tokio::select! {
            _ = stop.cancelled() => return,
            r = fd.readable() => match r {
                Ok(g) => g,
                Err(e) => return stopped(&trace, &clock, &e),
            },
        };
        loop {
            match ready.try_io(|s| s.get_ref().read(&mut buf)) {
                Ok(Ok(n)) => {
                    let t = clock.now_us();
                    let Some(r) = packet::parse(&buf[..n]) else {
                        continue;
                    };
                    if recent.contains(&(r.peer, r.isn)) {
                        continue;
                    }
                    if recent.len() == RECENT {
                        recent.pop_front();
                    }
                    recent.push_back((r.peer, r.isn));
                    if let Some(w) = watched_at(&watched, r.from) {
                        trace.emit(Event::ProxyRefused {
                            t,
                            replica: w.replica.clone(),
                            peer: r.peer.to_string(),
                            how: RefusedHow::Refused,
                        });
                    }
                }
                Ok(Err(e)) => return stopped(&trace, &clock, &e),
                Err(_would_block) => break,
            }
        }
    }
}

/// The proxy whose listen address sent a refusal.
fn watched_at(watched: &[Watched], from: SocketAddr) -> Option<&Watched> {
    watched.iter().find(|w| {
        w.listen.port() == from.port()
            && (w.listen.ip() == from.ip() || w.listen.ip().is_unspecified())
    })
}

fn stopped(trace: &TraceWriter, clock: &Clock, e: &std::io::Error) {
    trace.emit(Event::ProxyWatch {
        t: clock.now_us(),
        watching: false,
        detail: format!("the watch of refused connects stopped: {e}"),
    });
}
