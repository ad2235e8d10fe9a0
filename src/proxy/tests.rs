//! The proxy against a scripted upstream that streams SSE events one chunk at a time,
//! with raw TCP clients: exact bytes, exact boundaries, real RST/FIN.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::probe::lock;
use super::*;
use crate::trace::{Event, ProxyEndKind, RefusedHow};

/// An upstream that answers every POST with `n` SSE events `gap` apart (one chunk
/// each), then `[DONE]`. `kill` makes every connection drop at once (a crash).
struct Upstream {
    addr: SocketAddr,
    /// Events written so far (all connections).
    written: Arc<AtomicU32>,
    /// Requests received (their x-request-id).
    received: Arc<Mutex<Vec<String>>>,
    kill: watch::Sender<bool>,
}

/// Output delta `i`: an OpenAI chat chunk whose text is `<i>`.
fn event(i: u32) -> String {
    format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"<{i}>\"}}}}]}}\n\n")
}

fn chunk(s: &str) -> String {
    format!("{:x}\r\n{s}\r\n", s.len())
}

async fn upstream(n: u32, gap: Duration) -> Upstream {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let written = Arc::new(AtomicU32::new(0));
    let received = Arc::new(Mutex::new(Vec::new()));
    let (kill, _) = watch::channel(false);
    let (w, r, k) = (written.clone(), received.clone(), kill.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let (w, r, mut k) = (w.clone(), r.clone(), k.subscribe());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    // Read one request (head + content-length body).
                    let mut tmp = [0u8; 4096];
                    let head_end = loop {
                        if let Some(p) = buf.windows(4).position(|x| x == b"\r\n\r\n") {
                            break p + 4;
                        }
                        tokio::select! {
                            n = s.read(&mut tmp) => match n {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&tmp[..n]),
                            },
                            _ = k.wait_for(|x| *x) => return,
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                    let mut len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    let chunked = head.contains("transfer-encoding: chunked");
                    loop {
                        if chunked
                            && let Some(p) =
                                buf[head_end..].windows(5).position(|x| x == b"0\r\n\r\n")
                        {
                            len = p + 5;
                        }
                        if (!chunked || len > 0) && buf.len() >= head_end + len {
                            break;
                        }
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    let id = head
                        .lines()
                        .find_map(|l| l.strip_prefix("x-request-id:"))
                        .map(|v| v.trim().to_string())
                        .unwrap_or_default();
                    lock(&r).push(id);
                    buf.drain(..head_end + len);
                    let get = head.starts_with("get");
                    let mut out = String::from(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                    );
                    if get {
                        out = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".into();
                    }
                    if s.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                    if get {
                        continue;
                    }
                    for i in 1..=n {
                        tokio::select! {
                            _ = tokio::time::sleep(gap) => {}
                            _ = k.wait_for(|x| *x) => return,
                        }
                        // Counted before the write: the proxy may read it first.
                        w.fetch_add(1, Ordering::SeqCst);
                        if s.write_all(chunk(&event(i)).as_bytes()).await.is_err() {
                            return;
                        }
                    }
                    let tail = format!("{}0\r\n\r\n", chunk("data: [DONE]\n\n"));
                    if s.write_all(tail.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Upstream {
        addr,
        written,
        received,
        kill,
    }
}

struct Fixture {
    set: ProxySet,
    trace: std::path::PathBuf,
    handle: Option<crate::trace::TraceHandle>,
}

impl Fixture {
    async fn new(upstream: Option<String>) -> Fixture {
        let dir = std::env::temp_dir().join(format!(
            "haq-proxy-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let trace = dir.join("trace.jsonl");
        let (tw, th) = TraceWriter::create(&trace).expect("trace");
        let set = ProxySet::start(
            &[ProxySpec {
                name: "w1".into(),
                listen: "127.0.0.1:0".parse().expect("addr"),
                upstream,
            }],
            &tw,
            &Clock::start(),
        )
        .await
        .expect("proxy");
        Fixture {
            set,
            trace,
            handle: Some(th),
        }
    }

    fn p(&self) -> &Arc<ReplicaProxy> {
        &self.set.replicas[0]
    }

    /// Stops the proxy and returns the proxy events of the trace.
    fn events(&mut self) -> Vec<Event> {
        self.set.stop();
        self.trace_now()
    }

    /// The trace as written so far (its writer finished first).
    fn trace_now(&mut self) -> Vec<Event> {
        if let Some(h) = self.handle.take() {
            h.finish().expect("trace");
        }
        crate::trace::read(&self.trace)
            .expect("read")
            .map_while(Result::ok)
            .collect()
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn request(id: &str) -> String {
    let body = r#"{"stream":true}"#;
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: {id}\r\nx-haq-attempt: {id}/a1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

async fn client(p: &ReplicaProxy, id: &str) -> TcpStream {
    let mut s = TcpStream::connect(p.listen).await.expect("connect");
    s.write_all(request(id).as_bytes()).await.expect("send");
    s
}

/// Reads until `until` is in what was read, EOF, an error, or `wait` passes.
async fn read_for(
    s: &mut TcpStream,
    wait: Duration,
    until: &str,
) -> (String, Option<std::io::Result<()>>) {
    let mut got = Vec::new();
    let deadline = Instant::now() + wait;
    let mut tmp = [0u8; 4096];
    loop {
        if !until.is_empty() && String::from_utf8_lossy(&got).contains(until) {
            return (String::from_utf8_lossy(&got).into_owned(), None);
        }
        match tokio::time::timeout_at(deadline.into(), s.read(&mut tmp)).await {
            Err(_) => return (String::from_utf8_lossy(&got).into_owned(), None),
            Ok(Ok(0)) => return (String::from_utf8_lossy(&got).into_owned(), Some(Ok(()))),
            Ok(Ok(n)) => got.extend_from_slice(&tmp[..n]),
            Ok(Err(e)) => return (String::from_utf8_lossy(&got).into_owned(), Some(Err(e))),
        }
    }
}

const LONG: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_bytes_unchanged_and_records_each_exchange() {
    let up = upstream(5, Duration::from_millis(2)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    let mut direct = TcpStream::connect(up.addr).await.expect("direct");
    direct
        .write_all(request("d").as_bytes())
        .await
        .expect("send");
    let (want, _) = read_for(&mut direct, LONG, "0\r\n\r\n").await;
    let mut s = client(fx.p(), "r1").await;
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert_eq!(got, want, "the proxy must not change a byte");
    // A second request on the same (keep-alive) connection, and a health check.
    s.write_all(request("r2").as_bytes()).await.expect("send");
    let (got2, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert_eq!(got2, want);
    s.write_all(b"GET /ready HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .expect("send");
    let (ok, _) = read_for(&mut s, LONG, "\r\n\r\nok").await;
    assert!(ok.ends_with("ok"), "{ok}");
    drop(s);
    assert_eq!(fx.p().other_requests.load(Ordering::Relaxed), 1);
    let evs = fx.events();
    let reqs: Vec<_> = evs
        .iter()
        .filter_map(|e| match e {
            Event::ProxyRequest {
                id,
                attempt,
                replica,
                ..
            } => Some((id.clone(), attempt.clone(), replica.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        reqs,
        vec![
            (Some("r1".into()), Some("r1/a1".into()), "w1".to_string()),
            (Some("r2".into()), Some("r2/a1".into()), "w1".to_string())
        ]
    );
    for e in &evs {
        if let Event::ProxyEnd {
            events,
            end,
            status,
            first_event,
            ..
        } = e
        {
            assert_eq!(*events, 6, "5 events and [DONE]");
            assert_eq!(*end, ProxyEndKind::Completed);
            assert_eq!(*status, Some(200));
            assert!(first_event.is_some());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_ends_every_open_exchange_as_stopped_before_it_returns() {
    // Two streams still running (100 events 50 ms apart) when the proxies stop: each
    // gets its `proxy_end stopped` line, written before `stop` returns (the trace is
    // read at once after it), and the gateway side is reset.
    let up = upstream(100, Duration::from_millis(50)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    let mut s1 = client(&p, "r1").await;
    let mut s2 = client(&p, "r2").await;
    for s in [&mut s1, &mut s2] {
        let (got, _) = read_for(s, LONG, "<1>").await;
        assert!(got.contains("<1>"), "{got}");
    }
    fx.set.stop();
    let stopped: Vec<_> = fx
        .trace_now()
        .into_iter()
        .filter_map(|e| match e {
            Event::ProxyEnd {
                id: Some(id),
                end: ProxyEndKind::Stopped,
                events,
                ..
            } => Some((id, events)),
            _ => None,
        })
        .collect();
    let mut ids: Vec<_> = stopped.iter().map(|(id, _)| id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["r1", "r2"], "{stopped:?}");
    assert!(stopped.iter().all(|(_, n)| *n >= 1), "{stopped:?}");
    let (_, end) = read_for(&mut s1, LONG, "[DONE]").await;
    assert!(end.is_some(), "the gateway side must end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blackhole_forwards_nothing_keeps_sockets_open_and_heals() {
    let up = upstream(40, Duration::from_millis(10)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    let mut s = client(&p, "r1").await;
    let (before, _) = read_for(&mut s, LONG, "<3>").await;
    assert!(before.contains("<3>"));
    let (id, epoch) = p.add_rule(Rule::Blackhole);
    assert_eq!(p.applied(epoch, LONG).await, Ok(1));
    // Whatever was already in flight drains; then nothing passes.
    let _ = read_for(&mut s, Duration::from_millis(100), "").await;
    let written = up.written.load(Ordering::SeqCst);
    let (during, end) = read_for(&mut s, Duration::from_millis(400), "").await;
    assert_eq!(during, "", "bytes passed a blackhole");
    assert!(end.is_none(), "the socket must stay open: {end:?}");
    // The replica kept working (its writes went into the path's buffers).
    assert!(up.written.load(Ordering::SeqCst) >= written);
    // A new connection is accepted and held too: its request is recorded when it
    // came (the gateway routed it then), and the replica does not see it.
    let mut s2 = client(&p, "r2").await;
    let (d2, e2) = read_for(&mut s2, Duration::from_millis(200), "").await;
    assert_eq!((d2.as_str(), e2.is_none()), ("", true));
    // A request on the connection already open is read and recorded too.
    s.write_all(request("r3").as_bytes()).await.expect("send");
    let _ = read_for(&mut s, Duration::from_millis(200), "").await;
    assert!(
        !lock(&up.received).iter().any(|r| r == "r2" || r == "r3"),
        "a request crossed the blackhole: {:?}",
        lock(&up.received)
    );
    let heal_t = p.clock.now_us();
    assert!(p.remove_rule(id).is_some());
    let (after, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(
        after.contains("[DONE]"),
        "the stream resumes after heal: {after}"
    );
    let (after2, _) = read_for(&mut s2, LONG, "0\r\n\r\n").await;
    assert!(after2.contains("[DONE]"));
    let (after3, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(
        after3.contains("[DONE]"),
        "r3 is served after the heal: {after3}"
    );
    for r in ["r2", "r3"] {
        assert!(lock(&up.received).iter().any(|x| x == r), "{r} after heal");
    }
    let stamped: Vec<(String, u64)> = fx
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::ProxyRequest {
                id: Some(id), t, ..
            } if id != "r1" => Some((id, t)),
            _ => None,
        })
        .collect();
    assert_eq!(stamped.len(), 2, "{stamped:?}");
    assert!(
        stamped.iter().all(|(_, t)| *t < heal_t),
        "requests sent into a blackhole are stamped when they came, not at the heal ({heal_t}): {stamped:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_sends_rst_and_close_sends_fin() {
    let up = upstream(100, Duration::from_millis(10)).await;
    let fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    for (rule, want_reset) in [(Rule::Reset, true), (Rule::Close, false)] {
        let mut s = client(&p, "r").await;
        let _ = read_for(&mut s, LONG, "<1>").await;
        let (id, epoch) = p.add_rule(rule);
        assert_eq!(
            p.applied(epoch, LONG).await,
            Ok(0),
            "{rule:?}: every connection cut"
        );
        let (_, end) = read_for(&mut s, LONG, "").await;
        match (end, want_reset) {
            (Some(Err(e)), true) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            (Some(Ok(())), false) => {}
            other => panic!("{rule:?}: {other:?}"),
        }
        // While the rule lasts, new connections are cut on accept (the cut may even
        // beat the end of connect or the write of the request).
        if let Ok(mut s2) = TcpStream::connect(p.listen).await {
            let _ = s2.write_all(request("r").as_bytes()).await;
            let (d, end2) = read_for(&mut s2, LONG, "").await;
            assert!(d.is_empty() && end2.is_some(), "{rule:?}: {d} {end2:?}");
        }
        p.remove_rule(id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_and_throttle_slow_the_path() {
    let up = upstream(1, Duration::from_millis(1)).await;
    let fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    let (id, _) = p.add_rule(Rule::Delay(Duration::from_millis(300)));
    let t = Instant::now();
    let mut s = client(&p, "r").await;
    let (got, _) = read_for(&mut s, LONG, "HTTP/1.1").await;
    assert!(got.starts_with("HTTP/1.1"));
    // Request and response each wait 300 ms: a lower bound only.
    assert!(
        t.elapsed() >= Duration::from_millis(600),
        "{:?}",
        t.elapsed()
    );
    p.remove_rule(id);
    // 400 B/s: the ~200-byte response cannot pass in less than ~0.5 s after the burst.
    p.add_rule(Rule::Throttle(400));
    let t = Instant::now();
    let mut s = client(&p, "r").await;
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(got.ends_with("0\r\n\r\n"), "{got}");
    let min = (got.len() as f64 - 256.0) / 400.0;
    assert!(
        t.elapsed().as_secs_f64() >= min * 0.9,
        "{:?} for {} bytes",
        t.elapsed(),
        got.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_event_k_until_the_replica_dies_then_drops_it() {
    let up = upstream(20, Duration::from_millis(20)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    let mut seen = fx.set.board().watch("probe-x", ProxyPoint::Event(3));
    let mut s = client(&p, "probe-x").await;
    // Attribution first, then the point.
    assert!(
        matches!(seen.recv().await, Some(ProxySeen::Routed { ref replica, .. }) if replica == "w1")
    );
    let Some(ProxySeen::Reached {
        release,
        replica,
        attempt,
        ..
    }) = seen.recv().await
    else {
        panic!("not reached")
    };
    assert_eq!(
        (replica.as_str(), attempt.as_deref()),
        ("w1", Some("probe-x/a1"))
    );
    // The replica computed and wrote event 3; the gateway side has events 1 and 2 only.
    assert!(up.written.load(Ordering::SeqCst) >= 3);
    let (got, _) = read_for(&mut s, Duration::from_millis(300), "").await;
    assert!(got.contains("<2>"), "{got}");
    assert!(!got.contains("<3>"), "event 3 leaked: {got}");
    // The replica dies; the held event is dropped and the gateway side closes.
    up.kill.send_replace(true);
    let _ = release.send(Release::Drop);
    let (rest, end) = read_for(&mut s, LONG, "").await;
    assert!(
        !rest.contains("<3>"),
        "event 3 leaked after the kill: {rest}"
    );
    assert!(end.is_some(), "the gateway side must end");
    // A retry of the same request (to a replacement) is not held again: one firing.
    let fresh = upstream(5, Duration::from_millis(1)).await;
    p.set_upstream(&fresh.addr.to_string());
    let mut s2 = client(&p, "probe-x").await;
    let (again, _) = read_for(&mut s2, LONG, "0\r\n\r\n").await;
    assert!(again.contains("<3>") && again.contains("[DONE]"), "{again}");
    assert!(matches!(seen.recv().await, Some(ProxySeen::Routed { .. })));
    assert!(seen.try_recv().is_err(), "fired twice");
    let evs = fx.events();
    assert!(
        evs.iter().any(|e| matches!(e, Event::ProxyEnd { id: Some(i), end: ProxyEndKind::HeldDropped, held: Some(3), events, .. } if i == "probe-x" && *events >= 3)),
        "{evs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_release_delivers_what_was_held_though_the_replica_is_done() {
    // Event 2 of 3 held; the replica writes the rest of its answer into the hold and
    // goes quiet (its connection kept alive). An automatic release lets it through
    // after its grace, with nothing else left to wake the connection.
    let up = upstream(3, Duration::from_millis(5)).await;
    let fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    let mut seen = fx.set.board().watch("probe-a", ProxyPoint::Event(2));
    let mut s = client(&p, "probe-a").await;
    assert!(matches!(seen.recv().await, Some(ProxySeen::Routed { .. })));
    let Some(ProxySeen::Reached { release, .. }) = seen.recv().await else {
        panic!("not reached")
    };
    let (got, _) = read_for(&mut s, Duration::from_millis(300), "").await;
    assert!(got.contains("<1>") && !got.contains("<2>"), "{got}");
    let _ = release.send(Release::Auto);
    let (rest, end) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(
        rest.contains("<2>") && rest.contains("<3>") && rest.contains("[DONE]"),
        "the held answer stalled after its automatic release: {rest:?} {end:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_and_prefill_points_hold_before_the_engine_and_before_the_first_byte() {
    let up = upstream(3, Duration::from_millis(5)).await;
    let fx = Fixture::new(Some(up.addr.to_string())).await;
    let p = fx.p().clone();
    // Queued: the replica never sees the request while it is held.
    let mut seen = fx.set.board().watch("q", ProxyPoint::Queued);
    let mut s = client(&p, "q").await;
    let _ = seen.recv().await; // routed
    let Some(ProxySeen::Reached { release, .. }) = seen.recv().await else {
        panic!("not reached")
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        lock(&up.received).is_empty(),
        "the replica saw a held request"
    );
    let _ = release.send(Release::Forward);
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"));
    assert_eq!(*lock(&up.received), vec!["q".to_string()]);
    // Prefill: the replica has the request, the gateway gets no byte until released.
    let mut seen = fx.set.board().watch("pf", ProxyPoint::Prefill);
    let mut s = client(&p, "pf").await;
    let _ = seen.recv().await;
    let Some(ProxySeen::Reached { release, .. }) = seen.recv().await else {
        panic!("not reached")
    };
    let (none, _) = read_for(&mut s, Duration::from_millis(300), "").await;
    assert_eq!(none, "");
    assert_eq!(lock(&up.received).len(), 2);
    let _ = release.send(Release::Forward);
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(
        got.starts_with("HTTP/1.1 200") && got.contains("[DONE]"),
        "{got}"
    );
}

/// A replica that died without haq knowing: the first connection is accepted (the
/// listener was open), the proxy's own connect is refused, and the gateway's
/// connection is reset before a byte of it is read — recorded as a connect attempt to
/// the dead endpoint. From then on the listener is closed: the next connect is refused
/// by the kernel (ECONNREFUSED, exactly as without haq) and recorded all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_to_a_dead_replica_are_refused_and_recorded() {
    let dead = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = dead.local_addr().expect("addr");
    drop(dead);
    let mut fx = Fixture::new(Some(addr.to_string())).await;
    let p = fx.p().clone();
    // The reset often comes before the connect has even completed on this side (a
    // gateway then sees its connect fail, as a refusal would have made it).
    let c = tokio::net::TcpSocket::new_v4().expect("socket");
    c.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let first = c.local_addr().expect("addr").to_string();
    match c.connect(p.listen).await {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
        Ok(mut s) => {
            let _ = s.write_all(request("r9").as_bytes()).await;
            let (got, end) = read_for(&mut s, LONG, "").await;
            assert_eq!(got, "");
            assert!(
                matches!(end, Some(Err(ref e)) if e.kind() == std::io::ErrorKind::ConnectionReset),
                "{end:?}"
            );
        }
    }
    let deadline = Instant::now() + LONG;
    while p.is_listening() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut refused = Vec::new();
    for _ in 0..3 {
        let c = tokio::net::TcpSocket::new_v4().expect("socket");
        c.bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        refused.push(c.local_addr().expect("addr").to_string());
        let e = c.connect(p.listen).await.expect_err("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let evs = fx.events();
    let watching = evs.iter().find_map(|e| match e {
        Event::ProxyWatch { watching, .. } => Some(*watching),
        _ => None,
    });
    assert_eq!(watching, Some(true), "run as root (CAP_NET_RAW): {evs:?}");
    let attempts: Vec<(String, RefusedHow)> = evs
        .iter()
        .filter_map(|e| match e {
            Event::ProxyRefused {
                replica, peer, how, ..
            } if replica == "w1" => Some((peer.clone(), *how)),
            _ => None,
        })
        .collect();
    let mut want = vec![(first, RefusedHow::Reset)];
    want.extend(refused.into_iter().map(|a| (a, RefusedHow::Refused)));
    assert_eq!(attempts, want, "{evs:?}");
    // Nothing of the request was read: no exchange was begun.
    assert!(!evs.iter().any(|e| matches!(e, Event::ProxyRequest { .. })));
    assert!(evs.iter().any(|e| matches!(
        e,
        Event::ProxyListener { open: false, replica, .. } if replica == "w1"
    )));
}

/// A dead replica looks dead through the proxy (connection refused, M4), and the path
/// comes back on the same port when a replacement listens again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replica_refuses_connections_until_it_listens_again() {
    let up = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = up.local_addr().expect("addr");
    let fx = Fixture::new(Some(addr.to_string())).await;
    let p = fx.p().clone();
    assert!(p.is_listening());
    assert!(!p.check_dead().await, "a live replica is not dead");
    drop(up);
    assert!(p.check_dead().await);
    assert!(!p.is_listening());
    let e = TcpStream::connect(p.listen).await.expect_err("refused");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
    // The replacement listens on the old address: the path reopens by itself.
    let again = TcpListener::bind(addr).await.expect("rebind");
    let deadline = Instant::now() + LONG;
    while !p.is_listening() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(p.is_listening());
    let mut s = TcpStream::connect(p.listen).await.expect("connect");
    s.write_all(request("r").as_bytes()).await.expect("send");
    // (The proxy's liveness probes connect and close without a byte: skip them.)
    let got = tokio::time::timeout(LONG, async {
        loop {
            let (mut u, _) = again.accept().await.expect("accepted");
            let mut b = [0u8; 64];
            let n = u.read(&mut b).await.unwrap_or(0);
            if n > 0 {
                return String::from_utf8_lossy(&b[..n]).into_owned();
            }
        }
    })
    .await
    .expect("the request reached the replacement");
    assert!(got.starts_with("POST /v1/chat/completions"), "{got}");
}

/// A killed replica whose address still accepts for a while (its last threads
/// exiting) does not get its listener back until the address has refused once: a
/// connection accepted then would be reset, where without haq it is refused.
#[tokio::test]
async fn a_killed_replica_that_still_accepts_stays_closed_until_it_refuses() {
    let up = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = up.local_addr().expect("addr");
    let fx = Fixture::new(Some(addr.to_string())).await;
    let p = fx.p().clone();
    p.killing();
    let deadline = Instant::now() + LONG;
    while p.is_listening() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!p.is_listening(), "closed when the kill is sent");
    // The kill is "verified" while the dying process still accepts.
    p.kill_settled();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !p.is_listening(),
        "not reopened for an address that never refused"
    );
    // It refuses (the process is gone), then a replacement listens: reopened.
    drop(up);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let again = TcpListener::bind(addr).await.expect("rebind");
    let deadline = Instant::now() + LONG;
    while !p.is_listening() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(p.is_listening(), "reopened for the replacement");
    drop(again);
}

/// The run token of the marker tests.
const TOKEN: crate::wire::marker::RunToken = crate::wire::marker::RunToken::from_u32(0x5eed_f00d);

/// A request with `marker` in its body (a `user` field), `x-request-id: header` when
/// given, its body chunked (two chunks, the marker split across them) or not.
fn marked(header: Option<&str>, marker: &str, chunked: bool) -> Vec<u8> {
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"the cluster serves tokens"}}],"stream":true,"user":"{marker}"}}"#
    );
    let mut head = String::from("POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n");
    if let Some(h) = header {
        head.push_str(&format!("x-request-id: {h}\r\n"));
    }
    if chunked {
        let cut = body.find("haq-").map_or(body.len() / 2, |i| i + 6);
        let (a, b) = body.split_at(cut);
        head.push_str("transfer-encoding: chunked\r\n\r\n");
        format!("{head}{}{}0\r\n\r\n", chunk(a), chunk(b)).into_bytes()
    } else {
        format!("{head}content-length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }
}

/// Writes `req` a few bytes at a time, so the proxy reads its body in many pieces.
async fn send_slowly(s: &mut TcpStream, req: &[u8]) {
    for part in req.chunks(23) {
        s.write_all(part).await.expect("send");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn attributions(evs: &[Event]) -> Vec<(Option<String>, Option<LegByT>, Option<UnattrT>)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::ProxyRequest {
                id,
                by,
                unattributed,
                ..
            } => Some((id.clone(), *by, *unattributed)),
            _ => None,
        })
        .collect()
}

type LegByT = crate::trace::LegBy;
type UnattrT = crate::trace::Unattributed;

/// Behind a gateway that forwards no `x-request-id` (or rewrites it), each upstream
/// request is tied to its client request by the marker in its body — chunked or not,
/// read in many pieces — and the bytes pass unchanged; a body without this run's
/// marker is recorded unattributed, with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_attributed_by_the_marker_in_their_body() {
    use crate::trace::{LegBy, Unattributed};
    use crate::wire::marker::{RunToken, marker};
    let up = upstream(2, Duration::from_millis(1)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    fx.set.board().set_run_token(TOKEN);
    let ours = |id: &str| marker(TOKEN, id);
    let cases: Vec<Vec<u8>> = vec![
        marked(None, &ours("r000001"), false),
        marked(None, &ours("r000002"), true),
        // A gateway's own request id: the marker names the client request.
        marked(Some("gw-77"), &ours("r000003"), true),
        marked(Some("r000004"), "not-a-marker", false),
        marked(None, &marker(RunToken::from_u32(1), "r000005"), false),
        marked(None, "nothing", true),
    ];
    let mut direct = TcpStream::connect(up.addr).await.expect("direct");
    direct.write_all(&cases[1]).await.expect("send");
    let (want, _) = read_for(&mut direct, LONG, "0\r\n\r\n").await;
    let mut s = TcpStream::connect(fx.p().listen).await.expect("connect");
    for req in &cases {
        send_slowly(&mut s, req).await;
        let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
        assert_eq!(got, want, "the proxy must not change a byte");
    }
    drop(s);
    let evs = fx.events();
    let m = Some(LegBy::Marker);
    assert_eq!(
        attributions(&evs),
        vec![
            (Some("r000001".into()), m, None),
            (Some("r000002".into()), m, None),
            (Some("r000003".into()), m, None),
            (Some("r000004".into()), Some(LegBy::Header), None),
            (None, None, Some(Unattributed::OtherRun)),
            (None, None, Some(Unattributed::NoMarker)),
        ]
    );
    // Every exchange ended under the id it was attributed to.
    let ends: Vec<Option<String>> = evs
        .iter()
        .filter_map(|e| match e {
            Event::ProxyEnd { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        attributions(&evs)
            .into_iter()
            .map(|a| a.0)
            .collect::<Vec<_>>()
    );
}

/// A probe found by its marker alone is held at the `Queued` point before the replica
/// sees a byte of it, while other requests pass (held only until their marker is
/// read); at the `Prefill` point its response is held from the first byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_is_found_by_its_marker_and_held_before_the_replica_sees_it() {
    use crate::wire::marker::marker;
    let up = upstream(3, Duration::from_millis(5)).await;
    let fx = Fixture::new(Some(up.addr.to_string())).await;
    fx.set.board().set_run_token(TOKEN);
    let p = fx.p().clone();
    let mut seen = fx.set.board().watch("probe-q", ProxyPoint::Queued);
    // Another request while the probe is watched: it goes through.
    let mut other = TcpStream::connect(p.listen).await.expect("connect");
    send_slowly(&mut other, &marked(None, &marker(TOKEN, "r1"), true)).await;
    let (got, _) = read_for(&mut other, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"), "{got}");
    let mut s = TcpStream::connect(p.listen).await.expect("connect");
    send_slowly(&mut s, &marked(None, &marker(TOKEN, "probe-q"), true)).await;
    assert!(matches!(seen.recv().await, Some(ProxySeen::Routed { .. })));
    let Some(ProxySeen::Reached { release, .. }) = seen.recv().await else {
        panic!("not reached")
    };
    // Requests sent while it is held pass, and the replica never saw the probe.
    send_slowly(&mut other, &marked(None, &marker(TOKEN, "r2"), false)).await;
    let (got, _) = read_for(&mut other, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"), "{got}");
    assert_eq!(
        lock(&up.received).len(),
        2,
        "the replica saw a held request"
    );
    let _ = release.send(Release::Forward);
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"), "{got}");
    assert_eq!(lock(&up.received).len(), 3);
    // Prefill, by the marker: the gateway gets no byte until released.
    let mut seen = fx.set.board().watch("probe-p", ProxyPoint::Prefill);
    let mut s = TcpStream::connect(p.listen).await.expect("connect");
    send_slowly(&mut s, &marked(None, &marker(TOKEN, "probe-p"), false)).await;
    let _ = seen.recv().await;
    let Some(ProxySeen::Reached { release, .. }) = seen.recv().await else {
        panic!("not reached")
    };
    let (none, _) = read_for(&mut s, Duration::from_millis(300), "").await;
    assert_eq!(none, "");
    assert_eq!(lock(&up.received).len(), 4);
    let _ = release.send(Release::Forward);
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"), "{got}");
}

/// A body longer than the scan cap with its marker past the cap is forwarded whole and
/// recorded unattributed (`over_cap`), even while a `Queued` probe is watched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_the_scan_cap_is_forwarded_unattributed() {
    use crate::wire::marker::{SCAN_CAP, marker};
    let up = upstream(1, Duration::from_millis(1)).await;
    let mut fx = Fixture::new(Some(up.addr.to_string())).await;
    fx.set.board().set_run_token(TOKEN);
    let _seen = fx.set.board().watch("probe-q", ProxyPoint::Queued);
    let pad = "x".repeat(SCAN_CAP as usize);
    let body = format!(r#"{{"prompt":"{pad}","user":"{}"}}"#, marker(TOKEN, "r1"));
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut s = TcpStream::connect(fx.p().listen).await.expect("connect");
    s.write_all(req.as_bytes()).await.expect("send");
    let (got, _) = read_for(&mut s, LONG, "0\r\n\r\n").await;
    assert!(got.contains("[DONE]"), "{got}");
    drop(s);
    let evs = fx.events();
    assert_eq!(
        attributions(&evs),
        vec![(None, None, Some(crate::trace::Unattributed::OverCap))]
    );
}
