//! haq's own HTTP/1.1 client for `http://` targets (`client.transport: auto`).
//!
//! Why a second client next to reqwest: on a stream every SSE event is a socket
//! wake-up, and through hyper each one costs two task polls (the connection task reads
//! and decodes, then hands the bytes over a channel to the request's task). Here the
//! request's own task reads its socket and decodes the chunk framing in place, so an
//! event costs one poll, one read, no copy and no allocation. Everything else a load
//! client needs is kept: keep-alive connections pooled per host (newest first, idle
//! ones checked before reuse, dropped after [`POOL_IDLE`]), a bounded connect,
//! chunked / content-length / close-delimited bodies, and errors that carry the I/O
//! error kind the classification reads (refused, timed out, reset, unexpected EOF).
//! A response head is bounded: at most [`MAX_HEAD`] bytes and [`MAX_HEADERS`] headers,
//! complete within the request's `head_timeout` of its first byte; past any of these
//! it is refused as a bad head (the `bad_head` outcome).
//! `https://` targets, and every target with `client.transport: reqwest`, go through
//! reqwest (rustls).

pub mod chunked;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Idle connections older than this are not reused.
pub const POOL_IDLE: Duration = Duration::from_secs(30);
/// Read buffer per connection.
const BUF: usize = 8 * 1024;
/// Largest response head accepted.
pub const MAX_HEAD: usize = 64 * 1024;
/// Most response headers accepted.
pub const MAX_HEADERS: usize = 128;

/// A failed send: before any response head.
#[derive(Debug)]
pub struct SendError {
    /// The connection could not be opened (refused, unreachable, timed out).
    pub connect: bool,
    /// The response head could not be accepted (too large, too many headers, not
    /// complete in time, not HTTP).
    pub head: bool,
    pub err: io::Error,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.connect {
            write!(f, "connect failed: {}", self.err)
        } else if self.head {
            write!(f, "bad response head: {}", self.err)
        } else {
            write!(f, "request failed: {}", self.err)
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.err)
    }
}

fn send_err(connect: bool, err: io::Error) -> SendError {
    SendError {
        connect,
        head: false,
        err,
    }
}

fn head_err(err: io::Error) -> SendError {
    SendError {
        connect: false,
        head: true,
        err,
    }
}

/// The client all requests share: clones share one pool.
#[derive(Clone)]
pub struct Client(Arc<Inner>);

struct Inner {
    connect_timeout: Duration,
    /// Sent with every request that does not name the header itself.
    defaults: HeaderMap,
    /// Idle connections per `host:port`, oldest first.
    idle: Mutex<HashMap<String, VecDeque<Conn>>>,
}

struct Conn {
    stream: TcpStream,
    local: Option<SocketAddr>,
    buf: Vec<u8>,
    since: Instant,
}

/// Where a URL points.
struct Target {
    /// `host:port`: the pool key and the address connected to.
    addr: String,
    /// The Host header (the port only when the URL names one).
    host: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> io::Result<Target> {
        let invalid =
            |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{url}: {why}"));
        let u = reqwest::Url::parse(url).map_err(|e| invalid(&e.to_string()))?;
        if u.scheme() != "http" {
            return Err(invalid("only http:// URLs go through the HTTP/1.1 client"));
        }
        let host_str = u
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid("no host"))?;
        let port = u.port_or_known_default().unwrap_or(80);
        // IPv6 hosts come bracketed, as both the Host header and the connect want them.
        let addr = format!("{host_str}:{port}");
        let host = match u.port() {
            Some(p) => format!("{host_str}:{p}"),
            None => host_str.to_string(),
        };
        let mut path = u.path().to_string();
        if let Some(q) = u.query() {
            path.push('?');
            path.push_str(q);
        }
        Ok(Target { addr, host, path })
    }
}

fn render_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// One request: method, URL, headers beyond the defaults, body.
pub struct Request<'a> {
    pub method: &'a str,
    pub url: &'a str,
    pub headers: &'a [(HeaderName, HeaderValue)],
    /// Headers named by the caller as plain strings (content type, request id).
    pub fixed: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    /// How long the response head may take once its first byte came.
    pub head_timeout: Duration,
}

impl Client {
    pub fn new(connect_timeout: Duration, defaults: &HeaderMap) -> Client {
        Client(Arc::new(Inner {
            connect_timeout,
            defaults: defaults.clone(),
            idle: Mutex::new(HashMap::new()),
        }))
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, HashMap<String, VecDeque<Conn>>> {
        self.0.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// An idle connection to `addr` still open, newest first.
    fn checkout(&self, addr: &str) -> Option<Conn> {
        let mut pool = self.pool();
        let list = pool.get_mut(addr)?;
        while let Some(c) = list.pop_back() {
            if c.since.elapsed() < POOL_IDLE && alive(&c.stream) {
                return Some(c);
            }
        }
        None
    }

    /// Keeps `c` idle for reuse; closes the oldest idle ones past [`POOL_IDLE`].
    fn checkin(&self, addr: &str, mut c: Conn) {
        c.since = Instant::now();
        let mut pool = self.pool();
        let list = pool.entry(addr.to_string()).or_default();
        while list.front().is_some_and(|o| o.since.elapsed() >= POOL_IDLE) {
            list.pop_front();
        }
        list.push_back(c);
    }

    async fn connect(&self, addr: &str) -> Result<Conn, SendError> {
        let stream =
            match tokio::time::timeout(self.0.connect_timeout, TcpStream::connect(addr)).await {
                Err(_) => {
                    let e = io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no connection to {addr} within {:?}",
                            self.0.connect_timeout
                        ),
                    );
                    return Err(send_err(true, e));
                }
                Ok(Err(e)) => return Err(send_err(true, e)),
                Ok(Ok(s)) => s,
            };
        stream.set_nodelay(true).map_err(|e| send_err(true, e))?;
        Ok(Conn {
            local: stream.local_addr().ok(),
            stream,
            buf: vec![0; BUF],
            since: Instant::now(),
        })
    }

    /// Opens up to `n` connections to `url`'s host at once and keeps them idle in the
    /// pool: the client end of each one opened, and how many failed.
    pub async fn warm(&self, url: &str, n: u32) -> (Vec<String>, u32) {
        let Ok(t) = Target::parse(url) else {
            return (Vec::new(), n);
        };
        let conns = futures_util::future::join_all((0..n).map(|_| self.connect(&t.addr))).await;
        let mut ends = Vec::new();
        let mut failed = 0;
        for c in conns {
            match c {
                Ok(c) => {
                    ends.push(c.local.map(|a| a.to_string()).unwrap_or_default());
                    self.checkin(&t.addr, c);
                }
                Err(_) => failed += 1,
            }
        }
        (ends, failed)
    }

    /// Sends `req` and reads the response head. A pooled connection found closed when
    /// the request is written is replaced by a new one (the request never left);
    /// after the request is written nothing is retried.
    pub async fn send(&self, req: &Request<'_>) -> Result<Response, SendError> {
        let t = Target::parse(req.url).map_err(|e| send_err(false, e))?;
        let mut head = Vec::with_capacity(512 + req.body.len());
        head.extend_from_slice(req.method.as_bytes());
        head.push(b' ');
        head.extend_from_slice(t.path.as_bytes());
        head.extend_from_slice(b" HTTP/1.1\r\n");
        render_header(&mut head, b"host", t.host.as_bytes());
        // A header the request names itself replaces the default (as in reqwest).
        for (k, v) in &self.0.defaults {
            let named = req
                .fixed
                .iter()
                .any(|(n, _)| k.as_str().eq_ignore_ascii_case(n))
                || req.headers.iter().any(|(n, _)| n == k);
            if !named {
                render_header(&mut head, k.as_str().as_bytes(), v.as_bytes());
            }
        }
        for (k, v) in req.fixed {
            render_header(&mut head, k.as_bytes(), v.as_bytes());
        }
        for (k, v) in req.headers {
            render_header(&mut head, k.as_str().as_bytes(), v.as_bytes());
        }
        if !req.body.is_empty() || req.method == "POST" {
            render_header(
                &mut head,
                b"content-length",
                req.body.len().to_string().as_bytes(),
            );
        }
        head.extend_from_slice(b"\r\n");
        head.extend_from_slice(req.body);

        let mut conn = match self.checkout(&t.addr) {
            Some(mut c) => match c.stream.write_all(&head).await {
                Ok(()) => c,
                // Closed while idle: the request did not leave; a new connection.
                Err(_) => self.write_new(&t.addr, &head).await?,
            },
            None => self.write_new(&t.addr, &head).await?,
        };
        let (head, end) = read_head(&mut conn, req.head_timeout).await?;
        let mut r = Response {
            status: head.status,
            headers: head.headers,
            local: conn.local,
            conn: Some(conn),
            framing: head.framing,
            keep: head.keep,
            start: head.len,
            end,
            client: self.clone(),
            addr: t.addr,
        };
        if matches!(r.framing, Framing::Length(0) | Framing::Empty) {
            r.finish(true);
        }
        Ok(r)
    }

    async fn write_new(&self, addr: &str, head: &[u8]) -> Result<Conn, SendError> {
        let mut c = self.connect(addr).await?;
        c.stream
            .write_all(head)
            .await
            .map_err(|e| send_err(false, e))?;
        Ok(c)
    }
}

/// An idle connection is usable when reading it would block: no EOF, no stray bytes.
fn alive(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(s.try_read(&mut b), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// How the body is delimited.
#[derive(Debug)]
enum Framing {
    Chunked(chunked::Decoder),
    /// Bytes still to come.
    Length(u64),
    /// Until the server closes the connection.
    Close,
    /// No body (204, 304).
    Empty,
}

/// A parsed response head.
struct Head {
    /// Its length in bytes: the body starts behind it.
    len: usize,
    status: u16,
    headers: HeaderMap,
    framing: Framing,
    /// The connection may serve another request after this body.
    keep: bool,
}

/// Reads until a whole response head is in; informational (1xx) heads are skipped.
/// Returns the head and the end of the bytes read (`buf[head.len..end]` is body).
/// Once its first byte came, the head must be complete within `timeout`.
async fn read_head(c: &mut Conn, timeout: Duration) -> Result<(Head, usize), SendError> {
    let mut end = 0;
    let mut deadline = None;
    loop {
        if end == c.buf.len() {
            if c.buf.len() >= MAX_HEAD {
                return Err(head_err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("response head larger than {MAX_HEAD} bytes"),
                )));
            }
            c.buf.resize((c.buf.len() * 2).min(MAX_HEAD), 0);
        }
        let read = c.stream.read(&mut c.buf[end..]);
        let n = match deadline {
            None => read.await,
            Some(at) => match tokio::time::timeout_at(at, read).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(head_err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "response head not complete {timeout:?} after its first byte ({end} bytes read)"
                        ),
                    )));
                }
            },
        }
        .map_err(|e| send_err(false, e))?;
        if n == 0 {
            return Err(send_err(
                false,
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed before a response head",
                ),
            ));
        }
        deadline.get_or_insert_with(|| tokio::time::Instant::now() + timeout);
        end += n;
        loop {
            match parse_head(&c.buf[..end]).map_err(head_err)? {
                None => break,
                Some(h) if (100..200).contains(&h.status) => {
                    c.buf.copy_within(h.len..end, 0);
                    end -= h.len;
                }
                Some(h) => return Ok((h, end)),
            }
        }
    }
}

fn parse_head(buf: &[u8]) -> io::Result<Option<Head>> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut r = httparse::Response::new(&mut slots);
    let len = match r.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(invalid(format!(
                "response head with more than {MAX_HEADERS} headers"
            )));
        }
        Err(e) => return Err(invalid(format!("invalid response head: {e}"))),
    };
    let status = r.code.unwrap_or(0);
    let mut headers = HeaderMap::with_capacity(r.headers.len());
    let (mut chunked, mut length, mut close) = (false, None, r.version != Some(1));
    for h in r.headers.iter() {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(h.name.as_bytes()),
            HeaderValue::from_bytes(h.value),
        ) else {
            return Err(invalid(format!("invalid response header {:?}", h.name)));
        };
        let v = || String::from_utf8_lossy(h.value).to_ascii_lowercase();
        if name == reqwest::header::TRANSFER_ENCODING {
            let v = v();
            chunked = v.rsplit(',').next().is_some_and(|c| c.trim() == "chunked");
        } else if name == reqwest::header::CONTENT_LENGTH {
            let v = v();
            let n: u64 = v
                .trim()
                .parse()
                .map_err(|_| invalid(format!("invalid content-length {v:?}")))?;
            if length.is_some_and(|l| l != n) {
                return Err(invalid("conflicting content-length headers".into()));
            }
            length = Some(n);
        } else if name == reqwest::header::CONNECTION {
            let v = v();
            if v.split(',').any(|t| t.trim() == "close") {
                close = true;
            } else if v.split(',').any(|t| t.trim() == "keep-alive") {
                close = false;
            }
        }
        headers.append(name, value);
    }
    let framing = if matches!(status, 204 | 304) {
        Framing::Empty
    } else if chunked {
        Framing::Chunked(chunked::Decoder::default())
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        close = true;
        Framing::Close
    };
    Ok(Some(Head {
        len,
        status,
        headers,
        framing,
        keep: !close,
    }))
}

/// A response whose head is in; the body is read with [`Response::fill`] and
/// [`Response::drain`]. Dropped before its end, it closes its connection.
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    /// The client end of the connection.
    pub local: Option<SocketAddr>,
    /// `None` once the body ended (the connection back in the pool, or closed).
    conn: Option<Conn>,
    framing: Framing,
    keep: bool,
    /// Body bytes read and not yet drained: `conn.buf[start..end]`.
    start: usize,
    end: usize,
    client: Client,
    addr: String,
}

fn eof_in_body() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "connection closed before the end of the body",
    )
}

impl Response {
    /// Waits for body bytes: `true` when some are ready to [`Response::drain`],
    /// `false` at the end of the body.
    pub async fn fill(&mut self) -> io::Result<bool> {
        if self.start < self.end {
            return Ok(true);
        }
        let Some(c) = self.conn.as_mut() else {
            return Ok(false);
        };
        let n = c.stream.read(&mut c.buf).await?;
        if n > 0 {
            (self.start, self.end) = (0, n);
            return Ok(true);
        }
        match self.framing {
            Framing::Close => {
                self.finish(false);
                Ok(false)
            }
            _ => Err(eof_in_body()),
        }
    }

    /// Hands the body bytes read to `out` (the chunk framing taken off).
    pub fn drain(&mut self, mut out: impl FnMut(&[u8])) -> io::Result<()> {
        let Some(c) = self.conn.as_ref() else {
            return Ok(());
        };
        let input = &c.buf[self.start..self.end];
        (self.start, self.end) = (0, 0);
        let (used, ended) = match &mut self.framing {
            Framing::Chunked(d) => {
                let used = d.decode(input, &mut out)?;
                (used, d.done())
            }
            Framing::Length(left) => {
                let take = (*left).min(input.len() as u64) as usize;
                out(&input[..take]);
                *left -= take as u64;
                (take, *left == 0)
            }
            Framing::Close => {
                out(input);
                (input.len(), false)
            }
            Framing::Empty => (0, true),
        };
        if ended {
            // Bytes behind the body: the connection is out of step, not reused.
            self.finish(used == input.len());
        }
        Ok(())
    }

    /// The body ended: its connection goes back to the pool if it may be reused.
    fn finish(&mut self, clean: bool) {
        if let Some(c) = self.conn.take()
            && clean
            && self.keep
        {
            self.client.checkin(&self.addr, c);
        }
    }
}

#[cfg(test)]
mod tests;
