//! The streaming client against a real HTTP/1.1 server on 127.0.0.1 that produces
//! each way a stream can end, byte for byte (chunk framing, cuts, resets), including
//! the three real wire captures of tests/data/wire/ (SPEC M3, M10).

use std::time::Duration;

use haq::client::{self, Call, Timeouts};
use haq::scenario::Transport;
use haq::trace::{ChunkKind, Clock, Event, Outcome, TraceWriter};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::support::{root, scratch};

fn sample(name: &str) -> Vec<u8> {
    std::fs::read(root().join("tests/data/wire").join(name)).expect("wire sample")
}

async fn write_chunk(s: &mut TcpStream, data: &[u8]) -> std::io::Result<()> {
    s.write_all(format!("{:x}\r\n", data.len()).as_bytes())
        .await?;
    s.write_all(data).await?;
    s.write_all(b"\r\n").await?;
    s.flush().await
}

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-haq-worker: w9\r\nx-queue-time: 12.5\r\n\r\n";

fn delta(text: &str) -> String {
    format!(
        "data: {{\"id\":\"c1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n"
    )
}

/// Sends `body` as chunked pieces of pseudo-random sizes (seeded by the length).
async fn send_pieces(s: &mut TcpStream, body: &[u8]) -> std::io::Result<()> {
    let mut i = 0;
    let mut k = body.len();
    while i < body.len() {
        k = (k * 7919 + 13) % 97 + 1;
        let j = (i + k).min(body.len());
        write_chunk(s, &body[i..j]).await?;
        i = j;
    }
    Ok(())
}

async fn respond(mut s: TcpStream, path: &str) -> std::io::Result<()> {
    let status = |code: u16, extra: &str, body: &str| {
        format!(
            "HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
            body.len()
        )
    };
    match path {
        "/done" | "/keepalive" => {
            s.write_all(SSE_HEAD).await?;
            if path == "/keepalive" {
                write_chunk(&mut s, b": ping\n\n").await?;
            }
            for w in ["a", " b", " c"] {
                write_chunk(&mut s, delta(w).as_bytes()).await?;
            }
            write_chunk(&mut s, b"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n").await?;
            s.write_all(b"0\r\n\r\n").await?;
        }
        "/llama" | "/litellm" => {
            let f = if path == "/llama" {
                "llamacpp-chat-stream-with-usage.sse"
            } else {
                "litellm-upstream-killed-mid-stream.sse"
            };
            s.write_all(SSE_HEAD).await?;
            send_pieces(&mut s, &sample(f)).await?;
            s.write_all(b"0\r\n\r\n").await?;
        }
        "/router" => {
            // The body stops before the chunked terminator; the connection closes.
            s.write_all(SSE_HEAD).await?;
            send_pieces(
                &mut s,
                &sample("router-upstream-killed-body-before-cut.sse"),
            )
            .await?;
            s.shutdown().await?;
        }
        "/seed-error" => {
            s.write_all(SSE_HEAD).await?;
            write_chunk(&mut s, delta("x").as_bytes()).await?;
            write_chunk(&mut s, b"data: {\"error\":{\"code\":\"upstream_decode_interrupted\",\"message\":\"m\",\"request_id\":\"q\",\"partial_output\":true,\"delivered_output_tokens\":1,\"retryable\":false}}\n\n").await?;
            s.write_all(b"0\r\n\r\n").await?;
        }
        "/429" => {
            let b = r#"{"error":{"message":"slow down","type":"rate_limit","code":429}}"#;
            s.write_all(status(429, "retry-after: 2\r\n", b).as_bytes())
                .await?
        }
        "/503" => s.write_all(status(503, "", "{}").as_bytes()).await?,
        "/500" => s.write_all(status(500, "", "boom").as_bytes()).await?,
        "/400" => s.write_all(status(400, "", "bad").as_bytes()).await?,
        "/first-token" => {
            s.write_all(SSE_HEAD).await?;
            // keep-alives do not count as a first token
            for _ in 0..50 {
                write_chunk(&mut s, b": keep-alive\n\n").await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        "/idle" => {
            s.write_all(SSE_HEAD).await?;
            write_chunk(&mut s, delta("x").as_bytes()).await?;
            tokio::time::sleep(Duration::from_secs(3)).await;
        }
        "/reset" => {
            s.write_all(SSE_HEAD).await?;
            write_chunk(&mut s, delta("part").as_bytes()).await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
            s.set_zero_linger()?; // close with RST
            drop(s);
            return Ok(());
        }
        "/truncated" => {
            s.write_all(SSE_HEAD).await?;
            write_chunk(&mut s, delta("x").as_bytes()).await?;
            s.write_all(b"0\r\n\r\n").await?;
        }
        "/malformed" => {
            s.write_all(SSE_HEAD).await?;
            write_chunk(&mut s, delta("x").as_bytes()).await?;
            write_chunk(&mut s, b"data: {\"choices\": [garbage\n\ndata: [DONE]\n\n").await?;
            s.write_all(b"0\r\n\r\n").await?;
        }
        "/whole" => {
            let b = r#"{"id":"w","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"{\"ok\": true}"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":5}}"#;
            s.write_all(status(200, "", b).as_bytes()).await?
        }
        _ => s.write_all(status(404, "", "").as_bytes()).await?,
    }
    s.flush().await
}

async fn server() -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let head = crate::support::read_request(&mut s, &mut Vec::new()).await;
                if let Some(path) =
                    head.and_then(|h| h.split_whitespace().nth(1).map(str::to_string))
                {
                    let _ = respond(s, &path).await;
                }
            });
        }
    });
    format!("http://{addr}")
}

struct Got {
    outcome: Outcome,
    events: Vec<Event>,
}

impl Got {
    fn end(&self) -> &Event {
        self.events
            .iter()
            .rev()
            .find(|e| matches!(e, Event::End { .. }))
            .expect("end event")
    }
    fn text(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Chunk {
                    kind: ChunkKind::Content,
                    text: Some(t),
                    ..
                } => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Generous timeouts (a busy CI machine), short ones for the timeout cases.
fn timeouts(short: bool) -> Timeouts {
    if short {
        Timeouts {
            first_token: Duration::from_millis(700),
            idle: Duration::from_millis(400),
        }
    } else {
        Timeouts {
            first_token: Duration::from_secs(20),
            idle: Duration::from_secs(10),
        }
    }
}

/// Both HTTP clients haq has: its own HTTP/1.1 client and reqwest.
const TRANSPORTS: [Transport; 2] = [Transport::Auto, Transport::Reqwest];

async fn call(url: &str, transport: Transport) -> Got {
    call_with(url, false, timeouts(false), transport).await
}

async fn call_with(url: &str, expect_json: bool, timeouts: Timeouts, transport: Transport) -> Got {
    haq::install_crypto_provider();
    let dir = scratch("client");
    let path = dir.join("t.jsonl");
    let (tw, th) = TraceWriter::create(&path).expect("trace");
    let http = client::Http::new(Duration::from_millis(300), &Default::default(), transport)
        .expect("client");
    let mut c = Call::new("r1", url, bytes::Bytes::from_static(b"{}"));
    c.expect_json = expect_json;
    let r = client::execute(&http, &c, timeouts, &Clock::start(), &tw).await;
    drop(tw);
    th.finish().expect("trace written");
    let events = haq::trace::read(&path)
        .expect("read")
        .map(|e| e.expect("event"))
        .collect();
    Got {
        outcome: r.outcome,
        events,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stream_end_is_classified() {
    let base = server().await;
    let cases = [
        ("/done", Outcome::Completed),
        ("/keepalive", Outcome::Completed),
        ("/llama", Outcome::Completed),
        ("/litellm", Outcome::ExplicitError),
        ("/router", Outcome::Reset),
        ("/seed-error", Outcome::ExplicitError),
        ("/429", Outcome::Rejected),
        ("/503", Outcome::Rejected),
        ("/500", Outcome::HttpError),
        ("/400", Outcome::HttpError),
        ("/first-token", Outcome::FirstTokenTimeout),
        ("/idle", Outcome::IdleTimeout),
        ("/reset", Outcome::Reset),
        ("/truncated", Outcome::Truncated),
        ("/malformed", Outcome::Malformed),
        ("/whole", Outcome::Completed),
    ];
    // Each call boxed: 32 unboxed call futures moved by value through the iterator
    // adapters' frames overflowed the test thread's 2 MiB stack in a debug build.
    let base = &base;
    let runs = TRANSPORTS.into_iter().flat_map(|tr| {
        cases.into_iter().map(move |(p, want)| {
            let url = format!("{base}{p}");
            let timeouts = match p {
                "/first-token" => timeouts(true),
                // A short silence after the first event, but no hurry for the first
                // one: a busy machine may take longer than 700 ms to deliver it.
                "/idle" => Timeouts {
                    idle: Duration::from_millis(400),
                    ..timeouts(false)
                },
                _ => timeouts(false),
            };
            Box::pin(async move {
                (
                    p,
                    want,
                    tr,
                    call_with(&url, p == "/whole", timeouts, tr).await,
                )
            })
        })
    });
    for (path, want, tr, got) in futures_util::future::join_all(runs).await {
        assert_eq!(got.outcome, want, "{path} ({tr:?}): {:?}", got.end());
        let Event::End {
            status,
            error,
            tokens,
            detail,
            usage,
            json_valid,
            ..
        } = got.end()
        else {
            unreachable!()
        };
        match path {
            "/llama" => {
                assert_eq!(*tokens, 64);
                assert!(got.text().starts_with("Write a short paragraph"));
            }
            "/litellm" => {
                let e = error.as_ref().expect("error fields");
                assert_eq!(e.code.as_deref(), Some("500"));
                assert_eq!(got.text(), "Write a short paragraph about");
            }
            "/router" => {
                assert_eq!(
                    got.text(),
                    "Write a short paragraph about the",
                    "partial text kept"
                );
                assert!(
                    detail
                        .as_deref()
                        .is_some_and(|d| d.contains("unexpected EOF")),
                    "{detail:?}"
                );
            }
            "/seed-error" => assert!(error.as_ref().is_some_and(|e| e.seed_shape)),
            "/429" => {
                assert_eq!(*status, Some(429));
                assert!(got.events.iter().any(|e| matches!(e,
                    Event::Response { retry_after: Some(r), .. } if r == "2")));
            }
            "/reset" => assert_eq!(got.text(), "part"),
            "/whole" => {
                assert_eq!(got.text(), "{\"ok\": true}");
                assert_eq!(usage.and_then(|u| u.completion), Some(5));
                assert_eq!(*json_valid, Some(true));
            }
            "/done" => {
                assert!(got.events.iter().any(|e| matches!(e,
                    Event::Response { queue_us: Some(12_500), worker: Some(w), .. } if w == "w9")));
            }
            "/keepalive" => assert!(got.events.iter().any(|e| matches!(
                e,
                Event::Chunk {
                    kind: ChunkKind::Comment,
                    ..
                }
            ))),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_and_connect_timeout() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr");
    drop(l);
    for tr in TRANSPORTS {
        let got = call(&format!("http://{addr}/x"), tr).await;
        assert_eq!(got.outcome, Outcome::Refused, "{tr:?}");
    }

    // A listener that never accepts, with its accept queue full: SYNs are dropped.
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = sock.local_addr().expect("addr");
    let _l = sock.listen(0).expect("listen");
    let mut fill = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            fill.push(s);
        }
    }
    for tr in TRANSPORTS {
        let got = call(&format!("http://{addr}/x"), tr).await;
        assert_eq!(
            got.outcome,
            Outcome::ConnectTimeout,
            "{tr:?}: {:?}",
            got.end()
        );
    }
}

/// A server that streams `n` deltas `gap` apart after its head (waiting `first`
/// before the first) and reports, per connection, how many it wrote before a write
/// failed: the client closed its connection.
async fn leaving_server(
    n: usize,
    first: Duration,
    gap: Duration,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<Option<usize>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                if crate::support::read_request(&mut s, &mut Vec::new())
                    .await
                    .is_none()
                {
                    return;
                }
                let mut cut = s.write_all(SSE_HEAD).await.err();
                tokio::time::sleep(first).await;
                let mut wrote = 0;
                while cut.is_none() && wrote < n {
                    cut = write_chunk(&mut s, delta("w ").as_bytes()).await.err();
                    if cut.is_none() {
                        wrote += 1;
                    }
                    tokio::time::sleep(gap).await;
                }
                let _ = tx.send(cut.map(|_| wrote));
            });
        }
    });
    (format!("http://{addr}/x"), rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_closes_its_connection_mid_stream_and_says_so() {
    use haq::scenario::Leave;
    let cases = [
        (Leave::AfterDeltas(2), Duration::ZERO),
        (Leave::BeforeFirstToken, Duration::from_millis(300)),
        (Leave::After(Duration::from_millis(400)), Duration::ZERO),
    ];
    for tr in TRANSPORTS {
        for (leave, first) in cases {
            // 40 deltas, 50 ms apart: 2 s of answer the client does not wait for.
            let (url, mut seen) = leaving_server(40, first, Duration::from_millis(50)).await;
            haq::install_crypto_provider();
            let dir = scratch("client-leave");
            let path = dir.join("t.jsonl");
            let (tw, th) = TraceWriter::create(&path).expect("trace");
            let http = client::Http::new(Duration::from_millis(300), &Default::default(), tr)
                .expect("client");
            let mut c = Call::new("r1", &url, bytes::Bytes::from_static(b"{}"));
            c.leave = Some(leave);
            let r = client::execute(&http, &c, timeouts(false), &Clock::start(), &tw).await;
            drop(tw);
            th.finish().expect("trace written");
            let what = format!("{leave:?} over {tr:?}");
            assert_eq!(r.outcome, Outcome::Abandoned, "{what}");
            let end = haq::trace::read(&path)
                .expect("read")
                .map(|e| e.expect("event"))
                .find_map(|e| match e {
                    Event::End {
                        outcome,
                        detail,
                        counted,
                        ..
                    } => Some((outcome, detail, counted)),
                    _ => None,
                })
                .expect("end");
            assert_eq!(end.0, Outcome::Abandoned, "{what}");
            let detail = end.1.unwrap_or_default();
            assert!(detail.contains("workload abandonment"), "{what}: {detail}");
            let counted = end.2.unwrap_or(0);
            match leave {
                Leave::AfterDeltas(_) => assert!((2..40).contains(&counted), "{what}: {counted}"),
                Leave::BeforeFirstToken => assert_eq!(counted, 0, "{what}"),
                Leave::After(_) => assert!(counted < 40, "{what}: {counted}"),
            }
            // The server's writes fail soon after: the connection was closed, not
            // left open and idle.
            let wrote = tokio::time::timeout(Duration::from_secs(20), seen.recv())
                .await
                .expect("the server finished")
                .flatten();
            assert!(wrote.is_some_and(|w| w < 40), "{what}: {wrote:?}");
        }
    }
}
