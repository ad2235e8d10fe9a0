//! HTTP/1.1 framing for the interposition proxy: where each request and response
//! starts and ends on the wire, and where each SSE event of a streamed response ends.
//! The proxy forwards the original bytes; this module only tells it where the
//! boundaries are (raw offsets), so nothing is re-encoded.

use crate::wire::headers::{ATTEMPT_HEADER, WORKER_HEADER};

/// Longest request or response head the proxy accepts.
pub const MAX_HEAD: usize = 64 * 1024;

/// How a message body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// `Content-Length: n`.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// A response that ends when the connection closes.
    UntilClose,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Bytes of the head, including the blank line.
    pub len: usize,
    pub method: String,
    pub path: String,
    /// `x-request-id`: the client's logical request id.
    pub request_id: Option<String>,
    /// `x-haq-attempt`: the gateway's attempt id.
    pub attempt: Option<String>,
    pub framing: Framing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    pub len: usize,
    pub status: u16,
    /// `content-type: text/event-stream`.
    pub sse: bool,
    pub framing: Framing,
    /// The serving worker named by the response (`x-haq-worker`), if any.
    pub worker: Option<String>,
}

fn header<'a>(headers: &'a [httparse::Header<'a>], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

fn body_framing(headers: &[httparse::Header<'_>]) -> Result<Option<Framing>, String> {
    if let Some(te) = header(headers, "transfer-encoding") {
        if te
            .rsplit(',')
            .next()
            .is_some_and(|l| l.trim().eq_ignore_ascii_case("chunked"))
        {
            return Ok(Some(Framing::Chunked));
        }
        return Err(format!("unsupported transfer-encoding {te:?}"));
    }
    match header(headers, "content-length") {
        Some(v) => v
            .parse()
            .map(|n| Some(Framing::Length(n)))
            .map_err(|_| format!("bad content-length {v:?}")),
        None => Ok(None),
    }
}

fn partial<T>(buf: &[u8]) -> Result<Option<T>, String> {
    if buf.len() > MAX_HEAD {
        Err(format!("head longer than {MAX_HEAD} bytes"))
    } else {
        Ok(None)
    }
}

/// Parses a request head at the start of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse_request(buf: &[u8]) -> Result<Option<RequestHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let framing = match body_framing(req.headers)? {
                Some(Framing::Length(0)) | None => Framing::Empty,
                Some(f) => f,
            };
            Ok(Some(RequestHead {
                len,
                method: req.method.unwrap_or("").to_string(),
                path: req.path.unwrap_or("").to_string(),
                request_id: header(req.headers, "x-request-id").map(str::to_string),
                attempt: header(req.headers, ATTEMPT_HEADER).map(str::to_string),
                framing,
            }))
        }
        Ok(httparse::Status::Partial) => partial(buf),
        Err(e) => Err(format!("not an HTTP/1.1 request: {e}")),
    }
}

/// Parses a response head at the start of `buf` (`method` of the request it answers).
pub fn parse_response(buf: &[u8], method: &str) -> Result<Option<ResponseHead>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let status = resp.code.unwrap_or(0);
            let no_body = method.eq_ignore_ascii_case("HEAD")
                || (100..200).contains(&status)
                || status == 204
                || status == 304;
            let framing = if no_body {
                Framing::Empty
            } else {
                match body_framing(resp.headers)? {
                    Some(Framing::Length(0)) => Framing::Empty,
                    Some(f) => f,
                    None => Framing::UntilClose,
                }
            };
            Ok(Some(ResponseHead {
                len,
                status,
                sse: header(resp.headers, "content-type")
                    .is_some_and(|c| c.starts_with("text/event-stream")),
                framing,
                worker: header(resp.headers, WORKER_HEADER).map(str::to_string),
            }))
        }
        Ok(httparse::Status::Partial) => partial(buf),
        Err(e) => Err(format!("not an HTTP/1.1 response: {e}")),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading the hex size (`digits` seen so far).
    Size {
        value: u64,
        digits: u8,
    },
    /// After the size: extensions up to the line feed.
    SizeRest {
        value: u64,
    },
    Data(u64),
    /// The CR LF after a chunk's data (`lf` once the CR was seen).
    DataEnd {
        cr: bool,
    },
    /// Trailer lines after the last chunk; `empty` while the current line is empty.
    Trailer {
        empty: bool,
    },
}

/// Walks one message body, reporting its data slices and where it ends.
#[derive(Debug, Clone)]
pub struct Body {
    framing: Framing,
    /// Bytes left (`Length`).
    left: u64,
    chunk: Chunk,
}

impl Body {
    pub fn new(framing: Framing) -> Body {
        Body {
            framing,
            left: match framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            chunk: Chunk::Size {
                value: 0,
                digits: 0,
            },
        }
    }

    /// The body runs until the connection closes.
    pub fn until_close(&self) -> bool {
        self.framing == Framing::UntilClose
    }

    pub fn chunked(&self) -> bool {
        self.framing == Framing::Chunked
    }

    /// Consumes body bytes from `buf`, calling `data(slice, offset_in_buf)` for each
    /// run of payload bytes. Returns `Some(n)` when the body ended after `n` bytes of
    /// `buf`, `None` when all of `buf` belongs to the body and more is to come.
    pub fn feed(
        &mut self,
        buf: &[u8],
        mut data: impl FnMut(&[u8], usize),
    ) -> Result<Option<usize>, String> {
        match self.framing {
            Framing::Empty => Ok(Some(0)),
            Framing::UntilClose => {
                if !buf.is_empty() {
                    data(buf, 0);
                }
                Ok(None)
            }
            Framing::Length(_) => {
                let n = (self.left.min(buf.len() as u64)) as usize;
                if n > 0 {
                    data(&buf[..n], 0);
                }
                self.left -= n as u64;
                Ok((self.left == 0).then_some(n))
            }
            Framing::Chunked => self.feed_chunked(buf, &mut data),
        }
    }

    fn feed_chunked(
        &mut self,
        buf: &[u8],
        data: &mut impl FnMut(&[u8], usize),
    ) -> Result<Option<usize>, String> {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            match self.chunk {
                Chunk::Size { value, digits } => match (b as char).to_digit(16) {
                    Some(d) if digits < 15 => {
                        self.chunk = Chunk::Size {
                            value: value * 16 + u64::from(d),
                            digits: digits + 1,
                        };
                        i += 1;
                    }
                    _ if digits > 0 && matches!(b, b';' | b' ' | b'\t' | b'\r' | b'\n') => {
                        self.chunk = Chunk::SizeRest { value };
                    }
                    _ => return Err(format!("bad chunk size byte {b:#04x}")),
                },
                Chunk::SizeRest { value } => {
                    i += 1;
                    if b == b'\n' {
                        self.chunk = if value == 0 {
                            Chunk::Trailer { empty: true }
                        } else {
                            Chunk::Data(value)
                        };
                    }
                }
                Chunk::Data(left) => {
                    let n = (left.min((buf.len() - i) as u64)) as usize;
                    data(&buf[i..i + n], i);
                    i += n;
                    self.chunk = if left == n as u64 {
                        Chunk::DataEnd { cr: false }
                    } else {
                        Chunk::Data(left - n as u64)
                    };
                }
                Chunk::DataEnd { cr } => {
                    i += 1;
                    match b {
                        b'\r' if !cr => self.chunk = Chunk::DataEnd { cr: true },
                        b'\n' => {
                            self.chunk = Chunk::Size {
                                value: 0,
                                digits: 0,
                            }
                        }
                        _ => return Err(format!("chunk data not followed by CRLF ({b:#04x})")),
                    }
                }
                Chunk::Trailer { empty } => {
                    i += 1;
                    match b {
                        b'\n' if empty => {
                            return Ok(Some(i));
                        }
                        b'\n' => self.chunk = Chunk::Trailer { empty: true },
                        b'\r' => {}
                        _ => self.chunk = Chunk::Trailer { empty: false },
                    }
                }
            }
        }
        Ok(None)
    }
}

/// Finds where SSE events end in a body (LF or CRLF line endings). Only blocks with a
/// field line count as events; comment-only blocks (keep-alives) do not.
#[derive(Debug, Clone)]
pub struct SseScan {
    at_line_start: bool,
    block_has_field: bool,
    /// Events completed so far.
    pub events: u32,
}

impl Default for SseScan {
    fn default() -> Self {
        SseScan {
            at_line_start: true,
            block_has_field: false,
            events: 0,
        }
    }
}

impl SseScan {
    /// Scans `data`; calls `on_event(end, n)` with the offset just past the blank line
    /// that completes event `n` (1-based).
    pub fn feed(&mut self, data: &[u8], mut on_event: impl FnMut(usize, u32)) {
        let mut i = 0;
        while i < data.len() {
            if self.at_line_start {
                match data[i] {
                    b'\n' => {
                        if self.block_has_field {
                            self.events += 1;
                            on_event(i + 1, self.events);
                        }
                        self.block_has_field = false;
                        i += 1;
                        continue;
                    }
                    b'\r' => {
                        i += 1;
                        continue;
                    }
                    b':' => {}
                    _ => self.block_has_field = true,
                }
                self.at_line_start = false;
            }
            match memchr::memchr(b'\n', &data[i..]) {
                Some(j) => {
                    i += j + 1;
                    self.at_line_start = true;
                }
                None => i = data.len(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads_with_ids_and_framing() {
        let raw = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-request-id: r1\r\nX-Haq-Attempt: r1/a2\r\ncontent-length: 5\r\n\r\nhello";
        let h = parse_request(raw).expect("ok").expect("complete");
        assert_eq!(h.len, raw.len() - 5);
        assert_eq!(h.method, "POST");
        assert_eq!(h.request_id.as_deref(), Some("r1"));
        assert_eq!(h.attempt.as_deref(), Some("r1/a2"));
        assert_eq!(h.framing, Framing::Length(5));
        assert_eq!(parse_request(&raw[..20]).expect("ok"), None);
        let get = parse_request(b"GET /ready HTTP/1.1\r\n\r\n")
            .expect("ok")
            .expect("complete");
        assert_eq!(get.framing, Framing::Empty);
        assert!(parse_request(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").is_err());
    }

    #[test]
    fn response_heads() {
        let h = parse_response(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nx-haq-worker: w2\r\n\r\n",
            "POST",
        )
        .expect("ok")
        .expect("complete");
        assert!(h.sse);
        assert_eq!(h.framing, Framing::Chunked);
        assert_eq!(h.worker.as_deref(), Some("w2"));
        let h = parse_response(b"HTTP/1.1 200 OK\r\n\r\n", "GET")
            .expect("ok")
            .expect("complete");
        assert_eq!(h.framing, Framing::UntilClose);
        let h = parse_response(b"HTTP/1.1 204 No Content\r\n\r\n", "GET")
            .expect("ok")
            .expect("complete");
        assert_eq!(h.framing, Framing::Empty);
    }

    /// Any split of a chunked SSE body gives the same data, events and end.
    #[test]
    fn chunked_sse_body_in_any_split() {
        let events = [
            "data: {\"a\":1}\n\n",
            ": keep-alive\n\n",
            "data: x\r\ndata: y\r\n\r\n",
            "data: [DONE]\n\n",
        ];
        let mut raw = Vec::new();
        for e in events {
            raw.extend_from_slice(format!("{:x}\r\n{e}\r\n", e.len()).as_bytes());
        }
        raw.extend_from_slice(b"0\r\n\r\nNEXT");
        let body_len = raw.len() - 4;
        for split in 0..raw.len() {
            for split2 in split..raw.len() {
                let mut b = Body::new(Framing::Chunked);
                let mut sse = SseScan::default();
                let mut decoded = Vec::new();
                let mut ends = Vec::new();
                let mut end = None;
                let mut base = 0;
                for part in [&raw[..split], &raw[split..split2], &raw[split2..]] {
                    if end.is_some() {
                        break;
                    }
                    let r = b
                        .feed(part, |d, _| {
                            let start = decoded.len();
                            decoded.extend_from_slice(d);
                            sse.feed(d, |e, n| ends.push((start + e, n)));
                        })
                        .expect("valid");
                    if let Some(n) = r {
                        end = Some(base + n);
                    }
                    base += part.len();
                }
                assert_eq!(end, Some(body_len), "split {split}/{split2}");
                assert_eq!(decoded, events.concat().as_bytes());
                assert_eq!(ends.iter().map(|e| e.1).collect::<Vec<_>>(), vec![1, 2, 3]);
            }
        }
    }

    #[test]
    fn length_body_ends_exactly() {
        let mut b = Body::new(Framing::Length(4));
        let mut got = Vec::new();
        assert_eq!(b.feed(b"ab", |d, _| got.extend_from_slice(d)), Ok(None));
        assert_eq!(
            b.feed(b"cdXY", |d, _| got.extend_from_slice(d)),
            Ok(Some(2))
        );
        assert_eq!(got, b"abcd");
    }

    #[test]
    fn raw_offsets_of_event_ends_point_into_the_wire_bytes() {
        let raw = b"6\r\ndata: \r\n3\r\nx\n\n\r\n0\r\n\r\n";
        let mut b = Body::new(Framing::Chunked);
        let mut sse = SseScan::default();
        let mut ends = Vec::new();
        b.feed(raw, |d, off| sse.feed(d, |e, _| ends.push(off + e)))
            .expect("valid");
        assert_eq!(ends, vec![17]);
        assert_eq!(&raw[..17], b"6\r\ndata: \r\n3\r\nx\n\n");
    }
}
