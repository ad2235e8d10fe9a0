//! Incremental decoder of HTTP/1.1 chunked transfer coding (RFC 9112 §7.1): fed the
//! bytes of each read as they come, split anywhere, it hands out the data in place
//! (no copy) and says when the last chunk and its trailer section have ended.

use std::io;

/// Longest chunk-size line (size, extensions) and trailer section accepted, bytes.
const MAX_META: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of the size; `digits` read so far.
    Size {
        digits: u8,
    },
    /// Chunk extensions (or whitespace before them), skipped to the line end.
    Ext,
    /// The LF after the size line's CR.
    SizeLf,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    TrailerLine,
    /// The LF of the final empty line.
    EndLf,
    Done,
}

/// Where a chunked body stands.
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    size: u64,
    /// Bytes of size lines and trailers since the last data: bounded.
    meta: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder {
            state: State::Size { digits: 0 },
            size: 0,
            meta: 0,
        }
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("malformed chunked body: {what}"),
    )
}

impl Decoder {
    /// The last chunk and the trailer section have been read.
    pub fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes `input`, handing each run of chunk data to `out`. Returns the bytes
    /// consumed: all of `input`, or fewer when the body ended inside it (the rest is
    /// not part of this body).
    pub fn decode(&mut self, input: &[u8], out: &mut impl FnMut(&[u8])) -> io::Result<usize> {
        let mut i = 0;
        while i < input.len() {
            if let State::Data(left) = self.state {
                let take = left.min((input.len() - i) as u64) as usize;
                out(&input[i..i + take]);
                i += take;
                self.state = if take as u64 == left {
                    State::DataCr
                } else {
                    State::Data(left - take as u64)
                };
                self.meta = 0;
                continue;
            }
            if self.state == State::Done {
                break;
            }
            let b = input[i];
            i += 1;
            self.meta += 1;
            if self.meta > MAX_META {
                return Err(bad("chunk-size line or trailer section too long"));
            }
            self.state = match self.state {
                State::Size { digits } => match b {
                    b'0'..=b'9' | b'a'..=b'f' | b'A'..=b'F' => {
                        if digits >= 16 {
                            return Err(bad("chunk size too large"));
                        }
                        let d = (b as char).to_digit(16).unwrap_or(0);
                        self.size = self.size * 16 + u64::from(d);
                        State::Size { digits: digits + 1 }
                    }
                    _ if digits == 0 => return Err(bad("expected a chunk size")),
                    b';' | b' ' | b'\t' => State::Ext,
                    b'\r' => State::SizeLf,
                    b'\n' => self.size_line_end(),
                    _ => return Err(bad("invalid byte in chunk size")),
                },
                State::Ext => match b {
                    b'\r' => State::SizeLf,
                    b'\n' => self.size_line_end(),
                    _ => State::Ext,
                },
                State::SizeLf => match b {
                    b'\n' => self.size_line_end(),
                    _ => return Err(bad("expected LF after the chunk size")),
                },
                State::DataCr => match b {
                    b'\r' => State::DataLf,
                    b'\n' => State::Size { digits: 0 },
                    _ => return Err(bad("expected CRLF after chunk data")),
                },
                State::DataLf => match b {
                    b'\n' => State::Size { digits: 0 },
                    _ => return Err(bad("expected LF after chunk data")),
                },
                State::TrailerStart => match b {
                    b'\r' => State::EndLf,
                    b'\n' => State::Done,
                    _ => State::TrailerLine,
                },
                State::TrailerLine => match b {
                    b'\n' => State::TrailerStart,
                    _ => State::TrailerLine,
                },
                State::EndLf => match b {
                    b'\n' => State::Done,
                    _ => return Err(bad("expected LF at the end of the body")),
                },
                State::Data(_) | State::Done => unreachable!("handled above"),
            };
        }
        Ok(i)
    }

    fn size_line_end(&mut self) -> State {
        let size = std::mem::take(&mut self.size);
        if size == 0 {
            State::TrailerStart
        } else {
            State::Data(size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    /// Decodes `pieces` in order; the data, whether the body ended, the bytes left.
    fn run<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> io::Result<(Vec<u8>, bool, usize)> {
        let mut d = Decoder::default();
        let mut data = Vec::new();
        let mut left = 0;
        for p in pieces {
            let n = d.decode(p, &mut |s| data.extend_from_slice(s))?;
            left += p.len() - n;
        }
        Ok((data, d.done(), left))
    }

    fn encode(chunks: &[&[u8]], trailer: &str) -> Vec<u8> {
        let mut v = Vec::new();
        for c in chunks {
            v.extend_from_slice(format!("{:X}\r\n", c.len()).as_bytes());
            v.extend_from_slice(c);
            v.extend_from_slice(b"\r\n");
        }
        v.extend_from_slice(format!("0\r\n{trailer}\r\n").as_bytes());
        v
    }

    #[test]
    fn any_split_gives_the_same_data_and_end() {
        let body = encode(
            &[
                b"data: {\"a\":1}\n\n",
                b"x",
                &[b'z'; 300],
                b"data: [DONE]\n\n",
            ],
            "x-trailer: 1\r\n",
        );
        let mut wire = body.clone();
        wire.extend_from_slice(b"HTTP/1.1 next");
        let (whole, done, left) = run([&wire[..]]).expect("decodes");
        assert!(done);
        assert_eq!(left, 13, "bytes after the body are not consumed");
        let mut want = b"data: {\"a\":1}\n\nx".to_vec();
        want.extend_from_slice(&[b'z'; 300]);
        want.extend_from_slice(b"data: [DONE]\n\n");
        assert_eq!(whole, want);
        // Every two-way split, and byte at a time.
        for cut in 0..=body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(
                run([a, b]).expect("split"),
                (want.clone(), true, 0),
                "cut {cut}"
            );
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(run(bytes).expect("bytes"), (want.clone(), true, 0));
        // Seeded random splits into many pieces.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        for _ in 0..500 {
            let mut pieces = Vec::new();
            let mut at = 0;
            while at < body.len() {
                let n = rng.random_range(1..=40).min(body.len() - at);
                pieces.push(&body[at..at + n]);
                at += n;
            }
            assert_eq!(run(pieces).expect("pieces"), (want.clone(), true, 0));
        }
    }

    #[test]
    fn extensions_bare_lf_and_uppercase_sizes_are_read() {
        let wire = b"a;name=value\r\n0123456789\r\n1F\n0123456789012345678901234567890\n0\r\n\r\n";
        let (data, done, _) = run([&wire[..]]).expect("decodes");
        assert!(done);
        assert_eq!(data.len(), 41);
    }

    #[test]
    fn a_cut_body_is_not_done() {
        let body = encode(&[b"hello"], "");
        for cut in 0..body.len() {
            let (_, done, _) = run([&body[..cut]]).expect("a prefix is no error");
            assert!(!done, "cut at {cut} must not look complete");
        }
    }

    #[test]
    fn malformed_framing_is_an_error() {
        for wire in [
            &b"zz\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5\rX",
            b"11111111111111111\r\n",
            b"0\r\n\rX",
        ] {
            let e = run([wire]).expect_err("malformed");
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{wire:?}");
        }
        let long = vec![b'a'; MAX_META + 10];
        let mut wire = b"0\r\n".to_vec();
        wire.extend_from_slice(&long);
        assert!(run([&wire[..]]).is_err(), "an endless trailer is refused");
    }
}
