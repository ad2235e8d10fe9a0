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

/// A word the answers are made of: one to three syllables of an onset and a vowel.
pub fn is_token_word(w: &str) -> bool {
    fn syllables(w: &str, n: usize) -> bool {
        if w.is_empty() {
            return (1..=3).contains(&n);
        }
        if n == 3 {
            return false;
        }
        ONSETS.iter().filter_map(|o| w.strip_prefix(o)).any(|rest| {
            VOWELS
                .iter()
                .filter_map(|v| rest.strip_prefix(v))
                .any(|r| syllables(r, n + 1))
        })
    }
    syllables(w, 0)
}

/// When `text` ends with the answer to the rest of it — a stream's delivered output
/// re-sent after its prompt (a migration, Q9) — the hash of that rest (as the prompt
/// hash of [`token`]) and how many answer tokens follow it: the answer goes on from
/// there, as a greedy model's would. The longest such tail wins; `None` when the text
/// does not end with its own answer.
pub fn own_tail(text: &str, seed: u64) -> Option<(u64, u32)> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let n = words.len();
    let mut j0 = n;
    while j0 > 1 && is_token_word(words[j0 - 1]) {
        j0 -= 1;
    }
    let body = text.trim();
    (j0..n).find_map(|j| {
        // The rest: the text up to the end of its word j-1.
        let mut end = 0;
        for w in &words[..j] {
            let at = body[end..].find(w)? + end;
            end = at + w.len();
        }
        let h = fnv1a(&body.as_bytes()[..end]);
        let k = (n - j) as u32;
        (0..k)
            .all(|i| token(h, seed, i).trim() == words[j + i as usize])
            .then_some((h, k))
    })
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
    fn an_answer_after_its_prompt_is_found_and_goes_on_from_there() {
        let prompt = "the cluster serves\n tokens while a replica fails";
        let h = fnv1a(prompt.as_bytes());
        let answer: String = (0..5).map(|i| token(h, 0, i)).collect();
        assert!(answer.split_whitespace().all(is_token_word), "{answer}");
        assert_eq!(own_tail(&format!("{prompt}{answer}"), 0), Some((h, 5)));
        assert_eq!(own_tail(&format!("  {prompt}{answer} "), 0), Some((h, 5)));
        assert_eq!(own_tail(prompt, 0), None, "no answer in it");
        // Another seed's answer, or the answer with a token missing, is not its own.
        assert_eq!(own_tail(&format!("{prompt}{answer}"), 1), None);
        let gap: String = [0, 1, 3].iter().map(|&i| token(h, 0, i)).collect();
        assert_eq!(own_tail(&format!("{prompt}{gap}"), 0), None);
        assert!(!is_token_word("the") && !is_token_word("cluster"));
        assert!(is_token_word("besoumu") && !is_token_word("besoumubesoumu"));
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
