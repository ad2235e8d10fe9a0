//! The lines of a trace file, read into one reused buffer: what `BufRead::lines` gives
//! (the same lines, line ends and errors), without a fresh `String` grown byte run by
//! byte run for every line, as judging reads every line of a long trace (twice).

use std::io::{self, Read};

/// Bytes read at a time; the buffer grows past it only for a longer line.
const BLOCK: usize = 256 * 1024;

pub(super) struct Lines<R> {
    src: R,
    buf: Vec<u8>,
    /// The unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    eof: bool,
}

impl<R: Read> Lines<R> {
    pub(super) fn new(src: R) -> Self {
        Self::with_block(src, BLOCK)
    }

    fn with_block(src: R, block: usize) -> Self {
        Lines {
            src,
            buf: vec![0; block.max(1)],
            start: 0,
            end: 0,
            eof: false,
        }
    }

    /// The next line's bytes, not yet checked for UTF-8 ([`utf8`]).
    pub(super) fn next_bytes(&mut self) -> Option<io::Result<&[u8]>> {
        let (a, b, ended) = loop {
            if let Some(p) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                let a = self.start;
                self.start += p + 1;
                break (a, a + p, true);
            }
            if self.eof {
                if self.start == self.end {
                    return None;
                }
                let a = self.start;
                self.start = self.end;
                break (a, self.end, false);
            }
            if let Err(e) = self.fill() {
                // As a failed read ends a line of `lines()`; nothing is read after it.
                self.eof = true;
                self.start = self.end;
                return Some(Err(e));
            }
        };
        let mut line = &self.buf[a..b];
        if ended && let Some(l) = line.strip_suffix(b"\r") {
            line = l;
        }
        Some(Ok(line))
    }

    /// Whether any byte follows the lines read so far (another line will come).
    pub(super) fn more(&mut self) -> bool {
        while self.start == self.end && !self.eof {
            if self.fill().is_err() {
                return true; // the next call reports nothing more, as a read error
            }
        }
        self.start < self.end
    }

    /// Reads more bytes after the unread ones (moved to the front; the buffer doubles
    /// when they fill it).
    fn fill(&mut self) -> io::Result<()> {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            return Ok(());
        }
    }
}

/// A line as text; not UTF-8: the error `BufRead::lines` gives.
pub(super) fn utf8(line: &[u8]) -> io::Result<&str> {
    std::str::from_utf8(line).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// Every line, as `BufRead::lines` gives them (errors as their message).
    fn theirs(bytes: &[u8]) -> Vec<Result<String, String>> {
        io::BufReader::new(bytes)
            .lines()
            .map(|l| l.map_err(|e| e.to_string()))
            .collect()
    }

    fn mine(bytes: &[u8], block: usize) -> (Vec<Result<String, String>>, Vec<bool>) {
        let mut r = Lines::with_block(bytes, block);
        let (mut out, mut more) = (Vec::new(), Vec::new());
        while let Some(l) = r.next_bytes().map(|l| l.and_then(utf8)) {
            out.push(l.map(str::to_string).map_err(|e| e.to_string()));
            more.push(r.more());
        }
        (out, more)
    }

    /// The same lines and errors as `BufRead::lines`, wherever the blocks split the
    /// bytes, and `more` true exactly when a line follows.
    #[test]
    fn the_lines_are_the_ones_bufread_gives() {
        let long = "x".repeat(700);
        let cases: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\n".to_vec(),
            b"a".to_vec(),
            b"a\n".to_vec(),
            b"a\r\nb\r\n\r\n\nc\r".to_vec(),
            b"one\ntwo\n\n  \nthree".to_vec(),
            b"ok\n\xff\xfe bad\nafter\n".to_vec(),
            b"ok\ntorn \xe6\x97".to_vec(),
            b"\xe6\x97\xa5\xe6\x9c\xac\n\r\n".to_vec(),
            format!("{long}\nshort\n{long}{long}\n{long}").into_bytes(),
        ];
        for bytes in &cases {
            let want = theirs(bytes);
            for block in [1, 2, 3, 7, 64, 1000, BLOCK] {
                let (got, more) = mine(bytes, block);
                assert_eq!(
                    got,
                    want,
                    "{:?} in blocks of {block}",
                    String::from_utf8_lossy(bytes)
                );
                let follows: Vec<bool> = (0..want.len()).map(|i| i + 1 < want.len()).collect();
                assert_eq!(more, follows, "{:?}", String::from_utf8_lossy(bytes));
            }
        }
    }
}
