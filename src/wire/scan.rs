//! Byte scans shared by the chunk scanner and the trace's line reader and writer.

/// Where the first byte of `b` that a JSON string cannot hold as is (`"`, `\\`, a
/// control character) stands, or `b.len()`: the length of its plain prefix. Eight bytes
/// at a time, then byte by byte to the exact one (the chunk scanner, the trace's chunk-line reader and writer).
#[inline]
pub fn plain_prefix(b: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // High bit set in the bytes that are special; a byte above a flagged one may be
    // flagged wrongly (borrows), the lowest flagged one never is.
    let special = |x: u64| {
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let control = x.wrapping_sub(ONES * 0x20) & !x & HIGH;
        control | zero(x ^ (ONES * u64::from(b'"'))) | zero(x ^ (ONES * u64::from(b'\\')))
    };
    let mut i = 0;
    while let Some(w) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        if special(u64::from_le_bytes(w)) != 0 {
            break;
        }
        i += 8;
    }
    i + b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .unwrap_or(b.len() - i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight-bytes-at-a-time scan finds what a byte-by-byte one finds, wherever
    /// the special byte stands (before, in and after each block, in UTF-8 text).
    #[test]
    fn the_plain_prefix_is_where_the_first_special_byte_is() {
        let base = "abcdefgh ijklmnop é日本🙂 qrstuvwxyz 0123456789";
        for special in ["\"", "\\", "\n", "\u{0}", "\u{1f}"] {
            for at in 0..=base.len() {
                if !base.is_char_boundary(at) {
                    continue;
                }
                let s = format!("{}{special}{}", &base[..at], &base[at..]);
                let naive = s
                    .bytes()
                    .position(|c| c == b'"' || c == b'\\' || c < 0x20)
                    .unwrap_or(s.len());
                assert_eq!(plain_prefix(s.as_bytes()), naive, "{s:?}");
                assert_eq!(naive, at);
            }
        }
        assert_eq!(plain_prefix(base.as_bytes()), base.len());
        assert_eq!(plain_prefix(b""), 0);
        // A byte ≥ 0x80 and DEL are plain.
        let high = "\u{7f}\u{80}ü";
        assert_eq!(plain_prefix(high.as_bytes()), high.len());
    }
}
