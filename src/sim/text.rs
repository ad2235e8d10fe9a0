//! Deterministic output text: token i of an answer is a function of (prompt hash, seed,
//! i) only, so a repeated or spliced answer is visible in the text alone.

pub use crate::wire::hash::{fnv1a, mix64};

const ONSETS: &[&str] = &[
    "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "ch", "sh",
];
const VOWELS: &[&str] = &["a", "e", "i", "o", "u", "ai", "ou", "ea"];

/// Token `i` of the answer to a prompt with hash `prompt_hash`, with a leading space.
pub fn token(prompt_hash: u64, seed: u64, i: u32) -> String {
    let mut h = mix64(prompt_hash ^ mix64(seed) ^ mix64(u64::from(i) + 1));
    let syllables = 1 + (h % 3) as usize;
    h /= 3;
    let mut s = String::with_capacity(10);
    s.push(' ');
    for _ in 0..syllables {
        s.push_str(ONSETS[(h % ONSETS.len() as u64) as usize]);
        h /= ONSETS.len() as u64;
        s.push_str(VOWELS[(h % VOWELS.len() as u64) as usize]);
        h /= VOWELS.len() as u64;
    }
    s
}

/// Number of prompt tokens: whitespace-separated words.
pub fn count_tokens(text: &str) -> u32 {
    text.split_whitespace().count() as u32
}

/// Hash chain over the prompt's whole blocks of `block` tokens (words): block `b`'s
/// hash covers every token before its end, as vLLM's prefix cache keys do, so two
/// prompts share a cached block only when they share everything up to it (M6).
pub fn block_hashes(text: &str, block: u32) -> Vec<u64> {
    let block = block.max(1) as usize;
    let mut out = Vec::new();
    let mut h: u64 = 0x6861_712d_6b76; // "haq-kv"
    let mut n = 0;
    for w in text.split_whitespace() {
        h = mix64(h ^ fnv1a(w.as_bytes()));
        n += 1;
        if n == block {
            out.push(h);
            n = 0;
        }
    }
    out
}

/// The id of tool call `index` in the answer to a prompt: a function of (prompt hash,
/// seed, index) only, so a retry on another worker names the same call (M7).
pub fn tool_call_id(prompt_hash: u64, seed: u64, index: u32) -> String {
    let h = mix64(prompt_hash ^ mix64(seed ^ 0x746f_6f6c) ^ mix64(u64::from(index) + 101));
    format!("call_{:016x}", h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_varied() {
        let a: Vec<_> = (0..50).map(|i| token(7, 1, i)).collect();
        let b: Vec<_> = (0..50).map(|i| token(7, 1, i)).collect();
        assert_eq!(a, b);
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(distinct.len() > 35, "{distinct:?}");
        assert_ne!(token(7, 1, 0), token(8, 1, 0));
    }

    #[test]
    fn block_hashes_chain_over_the_prefix() {
        let a = block_hashes("a b c d e f g", 2);
        let b = block_hashes("a b c d x y z", 2);
        let c = block_hashes("q b c d e f g", 2);
        assert_eq!(a.len(), 3);
        assert_eq!(a[..2], b[..2]);
        assert_ne!(a[2], b[2]);
        assert!(a.iter().zip(&c).all(|(x, y)| x != y), "first block differs");
        assert_eq!(tool_call_id(1, 2, 0), tool_call_id(1, 2, 0));
        assert_ne!(tool_call_id(1, 2, 0), tool_call_id(1, 3, 0));
    }
}
