//! The per-request marker haq puts in every request body it sends (`client.marker`):
//! `haq-<run token>-<request id>`, so that haq's proxy can tie each upstream request
//! to its client request from the body alone — what every gateway forwards — even
//! when the gateway drops or rewrites `x-request-id` (issue 21).
//!
//! The run token ([`RunToken`], 8 lowercase hex digits, fresh per run and recorded in
//! the trace's `run_start`) keeps another client's or another haq run's traffic from
//! being attributed. The request id is written with bytes outside `[A-Za-z0-9._-]`
//! as `~XX`, so the marker survives any JSON re-encoding a gateway may do.
//!
//! [`MarkerScan`] finds the marker in a body fed slice by slice (across any split),
//! looking at each byte once and copying only the marker itself.

use std::fmt;

/// What every marker starts with.
pub const PREFIX: &[u8] = b"haq-";
/// Bytes of a run token.
pub const TOKEN_LEN: usize = 8;
/// Longest encoded request id read from a marker; a longer one is not a marker.
pub const MAX_ID: usize = 256;
/// Request ids of `client.marker: auto`'s requests before the load (`calibrate-user`,
/// …): never a request of the load, counted apart by the judgement.
pub const CALIBRATE_PREFIX: &str = "calibrate-";
/// Body bytes scanned for the marker: a body longer than this, with no marker in its
/// first `SCAN_CAP` bytes, is not attributed by its marker.
pub const SCAN_CAP: u64 = 1 << 20;

/// The run's token: 8 lowercase hex digits, fresh for every run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunToken([u8; TOKEN_LEN]);

impl RunToken {
    /// A token no other run is likely to have: process id, time and the process's
    /// random hash keys, mixed.
    pub fn fresh() -> RunToken {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u64(super::mono_ns());
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(d.as_nanos());
        }
        RunToken::from_u32(h.finish() as u32 ^ (h.finish() >> 32) as u32)
    }

    pub const fn from_u32(v: u32) -> RunToken {
        let mut t = [0u8; TOKEN_LEN];
        let mut i = 0;
        while i < TOKEN_LEN {
            t[i] = b"0123456789abcdef"[((v >> (28 - 4 * i)) & 0xf) as usize];
            i += 1;
        }
        RunToken(t)
    }

    /// A token as the trace records it (8 lowercase hex digits), else `None`.
    pub fn parse(s: &str) -> Option<RunToken> {
        let b = s.as_bytes();
        (b.len() == TOKEN_LEN && b.iter().all(|c| is_token_byte(*c))).then(|| {
            let mut t = [0u8; TOKEN_LEN];
            t.copy_from_slice(b);
            RunToken(t)
        })
    }

    pub fn as_str(&self) -> &str {
        // Only hex digits are ever stored.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

impl fmt::Display for RunToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_digit() || (b'a'..=b'f').contains(&b)
}

/// Bytes of an encoded id: written as they are (`~` starts an escape).
fn is_plain(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

fn is_id_byte(b: u8) -> bool {
    is_plain(b) || b == b'~'
}

/// The marker of request `id` in the run of `token`.
pub fn marker(token: RunToken, id: &str) -> String {
    let mut s = String::with_capacity(PREFIX.len() + TOKEN_LEN + 1 + id.len());
    s.push_str("haq-");
    s.push_str(token.as_str());
    s.push('-');
    for &b in id.as_bytes() {
        if is_plain(b) {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("~{b:02X}"));
        }
    }
    s
}

/// The request id of an encoded id, `None` when an escape is broken.
fn decode(enc: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(enc.len());
    let mut i = 0;
    while i < enc.len() {
        if enc[i] == b'~' {
            let hex = std::str::from_utf8(enc.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(enc[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Why a body gave no marker of this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No marker in the body.
    NoMarker,
    /// Only markers of other runs (another haq, or an earlier run).
    OtherRun,
    /// No marker in the first [`SCAN_CAP`] bytes of a longer body.
    OverCap,
}

/// Where the scan is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum St {
    /// Looking for [`PREFIX`]; `have` of its bytes ended the last slice.
    Seek {
        have: u8,
    },
    /// After the prefix: the token, the `-`, the id, into `got`.
    Read,
    Found(String),
    Stopped,
}

/// Finds this run's marker in a body fed slice by slice.
#[derive(Debug, Clone)]
pub struct MarkerScan {
    token: RunToken,
    st: St,
    got: Vec<u8>,
    fed: u64,
    other_run: bool,
}

impl MarkerScan {
    pub fn new(token: RunToken) -> MarkerScan {
        MarkerScan {
            token,
            st: St::Seek { have: 0 },
            got: Vec::new(),
            fed: 0,
            other_run: false,
        }
    }

    /// The request id of this run's marker, once found.
    pub fn found(&self) -> Option<&str> {
        match &self.st {
            St::Found(id) => Some(id),
            _ => None,
        }
    }

    /// Whether more bytes can change the outcome.
    pub fn looking(&self) -> bool {
        matches!(self.st, St::Seek { .. } | St::Read)
    }

    /// Why nothing was found, when nothing was (the body ended or the scan stopped).
    pub fn miss(&self) -> Option<Miss> {
        match self.st {
            St::Found(_) => None,
            St::Stopped if self.fed > SCAN_CAP => Some(Miss::OverCap),
            _ if self.other_run => Some(Miss::OtherRun),
            _ => Some(Miss::NoMarker),
        }
    }

    /// Scans the next bytes of the body; returns the id once it is found.
    pub fn feed(&mut self, d: &[u8]) -> Option<&str> {
        if !self.looking() {
            return self.found();
        }
        let room = SCAN_CAP.saturating_sub(self.fed);
        let over = d.len() as u64 > room;
        let d = &d[..d.len().min(room as usize)];
        self.fed += d.len() as u64;
        let mut i = 0;
        while i < d.len() && self.looking() {
            i = match self.st {
                St::Seek { have } => self.seek(d, i, have),
                _ => self.read(d, i),
            };
        }
        if over && self.looking() {
            // The body goes on past the cap: the rest is not read.
            self.fed = SCAN_CAP + 1;
            self.st = St::Stopped;
        }
        self.found()
    }

    /// Looks for the prefix from `d[i]`; returns where to go on.
    fn seek(&mut self, d: &[u8], i: usize, have: u8) -> usize {
        if have > 0 {
            let h = usize::from(have);
            if d[i] == PREFIX[h] {
                self.st = if h + 1 == PREFIX.len() {
                    self.got.clear();
                    St::Read
                } else {
                    St::Seek { have: have + 1 }
                };
                return i + 1;
            }
            // `h` starts nothing but the prefix: look again from this byte.
            self.st = St::Seek { have: 0 };
            return i;
        }
        let rest = &d[i..];
        match memchr::memmem::find(rest, PREFIX) {
            Some(j) => {
                self.got.clear();
                self.st = St::Read;
                i + j + PREFIX.len()
            }
            None => {
                // The longest end of `rest` that begins the prefix.
                let tail = (1..PREFIX.len())
                    .rev()
                    .find(|&k| rest.ends_with(&PREFIX[..k]))
                    .unwrap_or(0);
                self.st = St::Seek { have: tail as u8 };
                d.len()
            }
        }
    }

    /// Reads token, dash and id from `d[i]`; returns where to go on.
    fn read(&mut self, d: &[u8], mut i: usize) -> usize {
        while i < d.len() {
            let b = d[i];
            let n = self.got.len();
            let fits = match n {
                _ if n < TOKEN_LEN => is_token_byte(b),
                _ if n == TOKEN_LEN => b == b'-',
                _ => is_id_byte(b) && n < TOKEN_LEN + 1 + MAX_ID,
            };
            if !fits {
                self.end_marker();
                // The byte that ended it may begin another marker.
                return i;
            }
            self.got.push(b);
            i += 1;
        }
        i
    }

    /// A marker ended (the byte after it is not part of it).
    fn end_marker(&mut self) {
        self.st = St::Seek { have: 0 };
        if self.got.len() <= TOKEN_LEN + 1 {
            return; // `haq-` followed by something else
        }
        if self.got[..TOKEN_LEN] != self.token.0 {
            self.other_run = true;
            return;
        }
        if let Some(id) = decode(&self.got[TOKEN_LEN + 1..]) {
            self.st = St::Found(id);
        }
    }

    /// The body ended: a marker running to its very end is complete.
    pub fn end(&mut self) {
        if self.st == St::Read {
            self.end_marker();
        }
        if self.looking() {
            self.st = St::Stopped;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: RunToken = RunToken(*b"0a1b2c3d");

    fn scan(parts: &[&[u8]]) -> MarkerScan {
        let mut s = MarkerScan::new(T);
        for p in parts {
            s.feed(p);
        }
        s.end();
        s
    }

    #[test]
    fn markers_encode_and_decode_any_id() {
        for id in ["r000123", "probe-kill w2", "probe-ü/\"x\"~", ""] {
            let m = marker(T, id);
            assert!(m.bytes().all(|b| is_id_byte(b) || b == b'-'), "{m}");
            let body = format!(r#"{{"user":"{m}","x":1}}"#);
            let s = scan(&[body.as_bytes()]);
            let want = (!id.is_empty()).then_some(id);
            assert_eq!(s.found(), want, "{m}");
        }
        assert_eq!(marker(T, "r1"), "haq-0a1b2c3d-r1");
        assert_eq!(RunToken::parse("0a1b2c3d"), Some(T));
        assert_eq!(RunToken::parse("0A1b2c3d"), None);
        assert_eq!(RunToken::from_u32(0x0a1b_2c3d), T);
        assert_ne!(RunToken::fresh(), RunToken::fresh());
    }

    /// Every split of a body into three parts finds the same marker, wherever it is,
    /// after false starts (`haq`, `haq-` with another run's token, `haq-x`).
    #[test]
    fn the_marker_is_found_across_any_split() {
        let body = format!(
            r#"{{"messages":[{{"content":"haq haq-zz haq-{}-r9 hhaq-"}}],"user":"{}"}}"#,
            "ffffffff",
            marker(T, "r000042")
        );
        let b = body.as_bytes();
        for i in 0..b.len() {
            for j in i..b.len() {
                let s = scan(&[&b[..i], &b[i..j], &b[j..]]);
                assert_eq!(s.found(), Some("r000042"), "split {i}/{j}");
            }
        }
        // A marker that ends the body is complete; one of another run is not ours.
        assert_eq!(scan(&[b"x haq-0a1b2c3d-", b"r7"]).found(), Some("r7"));
        let other = scan(&[br#"{"user":"haq-ffffffff-r1"}"#]);
        assert_eq!((other.found(), other.miss()), (None, Some(Miss::OtherRun)));
        let none = scan(&[b"{}"]);
        assert_eq!(none.miss(), Some(Miss::NoMarker));
    }

    #[test]
    fn a_marker_past_the_cap_is_not_read() {
        let pad = vec![b' '; SCAN_CAP as usize - 4];
        let m = marker(T, "r1");
        let s = scan(&[&pad, m.as_bytes()]);
        assert_eq!((s.found(), s.miss()), (None, Some(Miss::OverCap)));
        // Inside the cap it is found, and the scan stops reading.
        let pad = vec![b' '; 1000];
        let mut s = MarkerScan::new(T);
        s.feed(&pad);
        assert_eq!(s.feed(format!("{m}\"").as_bytes()), Some("r1"));
        assert!(!s.looking());
    }
}
