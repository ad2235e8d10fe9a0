//! The HTTP/1.1 client against a scripted server on 127.0.0.1: what it writes, how it
//! reads each body framing, when it reuses a connection and when not.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// One answer of the scripted server: the bytes, and whether it closes after them.
#[derive(Clone)]
struct Answer(&'static [u8], bool);

/// A request as the server saw it: the connection it came on, its head, its body.
#[derive(Debug, Clone)]
struct Seen {
    conn: usize,
    head: String,
    body: Vec<u8>,
}

/// Serves `script` in order, one answer per request, over however many connections
/// the client opens.
async fn server(script: Vec<Answer>) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(script.into_iter()));
    let log = seen.clone();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut s, _)) = l.accept().await {
            n += 1;
            let (script, log) = (script.clone(), log.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some((head, body)) = read_request(&mut s, &mut buf).await else {
                        return;
                    };
                    log.lock().expect("log").push(Seen {
                        conn: n,
                        head,
                        body,
                    });
                    let Some(Answer(bytes, close)) = script.lock().expect("script").next() else {
                        return;
                    };
                    if s.write_all(bytes).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

async fn read_request(
    s: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, Vec<u8>)> {
    let mut tmp = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i + 4]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            while buf.len() < i + 4 + len {
                let n = s.read(&mut tmp).await.ok()?;
                if n == 0 {
                    return None;
                }
                buf.extend_from_slice(&tmp[..n]);
            }
            let body = buf[i + 4..i + 4 + len].to_vec();
            buf.drain(..i + 4 + len);
            return Some((head, body));
        }
        let n = s.read(&mut tmp).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

fn client() -> Client {
    let mut defaults = HeaderMap::new();
    defaults.insert("authorization", HeaderValue::from_static("Bearer k"));
    defaults.insert("x-haq-priority", HeaderValue::from_static("default"));
    Client::new(Duration::from_secs(2), &defaults)
}

async fn post(c: &Client, url: &str) -> Result<Response, SendError> {
    let headers = [(
        HeaderName::from_static("x-haq-priority"),
        HeaderValue::from_static("protected"),
    )];
    let req = Request {
        method: "POST",
        url,
        headers: &headers,
        fixed: &[("content-type", "application/json")],
        body: b"{\"a\":1}",
        head_timeout: Duration::from_secs(10),
    };
    c.send(&req).await
}

/// The whole body, read through fill/drain.
async fn body(r: &mut Response) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    while r.fill().await? {
        r.drain(|b| v.extend_from_slice(b))?;
    }
    Ok(v)
}

const CHUNKED: &[u8] = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-type: text/event-stream\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";

#[tokio::test]
async fn a_request_is_written_once_and_its_connection_reused() {
    let (url, seen) = server(vec![
        Answer(CHUNKED, false),
        Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc", false),
    ])
    .await;
    let c = client();
    let mut r = post(&c, &format!("{url}/v1/chat/completions?x=1"))
        .await
        .expect("sent");
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["content-type"], "text/event-stream");
    assert_eq!(body(&mut r).await.expect("body"), b"hello world");
    let mut r = post(&c, &format!("{url}/v1/x")).await.expect("sent");
    assert_eq!(body(&mut r).await.expect("body"), b"abc");
    assert!(!r.fill().await.expect("ended"), "the end stays the end");

    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].conn, seen[0].conn,
        "the second request reused the connection"
    );
    let head = &seen[0].head;
    let host = url.trim_start_matches("http://");
    assert!(
        head.starts_with("POST /v1/chat/completions?x=1 HTTP/1.1\r\n"),
        "{head}"
    );
    assert!(head.contains(&format!("\r\nhost: {host}\r\n")), "{head}");
    assert!(
        head.contains("\r\nauthorization: Bearer k\r\n"),
        "a default header: {head}"
    );
    assert!(head.contains("\r\nx-haq-priority: protected\r\n"), "{head}");
    assert!(
        !head.contains("default"),
        "the request's header replaces the default: {head}"
    );
    assert!(head.contains("\r\ncontent-length: 7\r\n"), "{head}");
    assert_eq!(seen[0].body, b"{\"a\":1}");
}

#[tokio::test]
async fn a_connection_the_server_closed_is_not_reused() {
    // The first answer is complete by its length, then the server closes anyway.
    let (url, seen) = server(vec![
        Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", true),
        Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", false),
    ])
    .await;
    let c = client();
    let mut r = post(&c, &url).await.expect("sent");
    assert_eq!(body(&mut r).await.expect("body"), b"ok");
    // Wait until the close has reached the client (its readiness is known).
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.pool().values().flatten().any(|conn| alive(&conn.stream)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut r = post(&c, &url).await.expect("a new connection");
    assert_eq!(body(&mut r).await.expect("body"), b"ok");
    let seen = seen.lock().expect("seen").clone();
    assert_ne!(seen[0].conn, seen[1].conn);
}

#[tokio::test]
async fn bodies_by_length_by_close_none_and_after_an_interim_head() {
    let (url, seen) = server(vec![
        Answer(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nabcd",
            false,
        ),
        Answer(b"HTTP/1.1 204 No Content\r\nx-a: 1\r\n\r\n", false),
        Answer(
            b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil the end",
            true,
        ),
    ])
    .await;
    let c = client();
    let mut r = post(&c, &url).await.expect("sent");
    assert_eq!(
        (r.status, body(&mut r).await.expect("body")),
        (200, b"abcd".to_vec())
    );
    let mut r = post(&c, &url).await.expect("sent");
    assert_eq!(r.status, 204);
    assert_eq!(body(&mut r).await.expect("no body"), b"");
    let mut r = post(&c, &url).await.expect("sent");
    assert_eq!(body(&mut r).await.expect("body"), b"until the end");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.iter().map(|s| s.conn).collect::<Vec<_>>(), [1, 1, 1]);
    assert!(
        c.pool().values().all(VecDeque::is_empty),
        "a close-delimited connection is not kept"
    );
}

#[tokio::test]
async fn a_cut_body_is_an_unexpected_eof_and_a_bad_head_invalid_data() {
    let (url, _) = server(vec![
        Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
            true,
        ),
        Answer(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc", true),
        Answer(b"HTTP/1.1 2x0 Nope\r\n\r\n", true),
        Answer(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
            true,
        ),
        Answer(b"", true),
    ])
    .await;
    let c = client();
    for want in ["hel", "abc"] {
        let mut r = post(&c, &url).await.expect("sent");
        let mut got = Vec::new();
        let e = loop {
            match r.fill().await {
                Ok(true) => r.drain(|b| got.extend_from_slice(b)).expect("framing"),
                Ok(false) => panic!("a cut body must not end cleanly"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(got, want.as_bytes(), "the part that came is kept");
    }
    let e = post(&c, &url).await.err().expect("a bad head");
    assert!(!e.connect);
    assert_eq!(e.err.kind(), io::ErrorKind::InvalidData);
    let mut r = post(&c, &url).await.expect("head is fine");
    let e = body(&mut r).await.expect_err("bad framing");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    let e = post(&c, &url).await.err().expect("closed without a head");
    assert_eq!(e.err.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn warm_connections_wait_in_the_pool_and_serve_requests() {
    let (url, seen) = server(vec![Answer(CHUNKED, false); 3]).await;
    let c = client();
    let (ends, failed) = c.warm(&url, 3).await;
    assert_eq!((ends.len(), failed), (3, 0));
    let mut rs = Vec::new();
    for _ in 0..3 {
        rs.push(post(&c, &url).await.expect("sent"));
    }
    for r in &mut rs {
        let end = r.local.map(|a| a.to_string()).unwrap_or_default();
        assert!(
            ends.contains(&end),
            "{end} is one of the warm connections {ends:?}"
        );
        assert_eq!(body(r).await.expect("body"), b"hello world");
    }
    let mut conns: Vec<usize> = seen.lock().expect("seen").iter().map(|s| s.conn).collect();
    conns.sort_unstable();
    conns.dedup();
    assert_eq!(conns.len(), 3, "each request on its own warm connection");

    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed = format!("http://{}", l.local_addr().expect("addr"));
    drop(l);
    let (ends, failed) = c.warm(&closed, 2).await;
    assert_eq!((ends.len(), failed), (0, 2));
    let e = post(&c, &closed).await.err().expect("refused");
    assert!(e.connect);
    assert_eq!(e.err.kind(), io::ErrorKind::ConnectionRefused);
}
