//! Requests the fate tests tell again and again: a clean one, one cut properly by
//! a kill, and the distinct words their deltas carry.

use super::state::{MS, Tb};
use crate::trace::Outcome;

/// Syllable words like the sim's: distinct, so repeats are real repeats.
pub fn words(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!(" {prefix}{i}ka")).collect()
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// r1 on w2: three deltas, then the seed's explicit error; w2 killed at 80 ms.
pub fn cut_properly(h: &mut Tb) -> &mut Tb {
    let w = words("k", 3);
    h.req("r1", 0)
        .head("r1", 10 * MS, "w2", "r1/a1")
        .deltas("r1", "A", 10 * MS, &refs(&w))
        .seed_error("r1", 100 * MS, 3)
        .end("r1", 101 * MS, Outcome::ExplicitError)
        .kill(80 * MS, "w2")
}

/// A clean request `id` on `worker`: head, `n` deltas, finish, completed.
pub fn clean(h: &mut Tb, id: &str, worker: &str, t0: u64, n: usize) {
    let w = words(id, n);
    let cid = format!("cmpl-{worker}-{id}");
    h.req(id, t0)
        .head(id, t0 + 50 * MS, worker, &format!("{id}/a1"))
        .deltas(id, &cid, t0 + 50 * MS, &refs(&w))
        .finish(id, &cid, t0 + 50 * MS + n as u64 * 20 * MS)
        .end(id, t0 + 60 * MS + n as u64 * 20 * MS, Outcome::Completed);
}
