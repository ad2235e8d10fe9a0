//! The KV cache as blocks of `block_size` tokens, with a prefix cache keyed by block
//! hashes (vLLM's automatic prefix caching, M6). Blocks are either free, private to one
//! sequence, or cached (shared, reference counted). Cached blocks nobody references
//! stay cached until evicted, least recently used first.

use std::collections::{BTreeSet, HashMap};

struct Cached {
    refs: u32,
    tick: u64,
}

pub struct Kv {
    pub total: u32,
    free: u32,
    cached: HashMap<u64, Cached>,
    /// (last use, hash) of cached blocks with no reference: evictable.
    idle: BTreeSet<(u64, u64)>,
    tick: u64,
    pub caching: bool,
}

impl Kv {
    pub fn new(total: u32, caching: bool) -> Kv {
        Kv {
            total,
            free: total,
            cached: HashMap::new(),
            idle: BTreeSet::new(),
            tick: 0,
            caching,
        }
    }

    /// Blocks a sequence could get now (free plus evictable).
    pub fn available(&self) -> u32 {
        self.free + self.idle.len() as u32
    }

    /// Blocks in use by running sequences (what vLLM reports as KV cache usage).
    pub fn used(&self) -> u32 {
        self.total - self.available()
    }

    /// Takes `n` blocks for private use, evicting idle cached blocks if needed.
    pub fn alloc(&mut self, n: u32) -> bool {
        if n > self.available() {
            return false;
        }
        let mut need = n;
        let from_free = need.min(self.free);
        self.free -= from_free;
        need -= from_free;
        while need > 0 {
            let Some((tick, h)) = self.idle.pop_first() else {
                return false;
            };
            let _ = tick;
            self.cached.remove(&h);
            need -= 1;
        }
        true
    }

    /// Returns private blocks.
    pub fn release(&mut self, n: u32) {
        self.free = (self.free + n).min(self.total);
    }

    /// Longest run of leading `hashes` that is cached; each is referenced.
    pub fn lookup(&mut self, hashes: &[u64]) -> Vec<u64> {
        let mut hit = Vec::new();
        if !self.caching {
            return hit;
        }
        self.tick += 1;
        for h in hashes {
            let Some(c) = self.cached.get_mut(h) else {
                break;
            };
            if c.refs == 0 {
                self.idle.remove(&(c.tick, *h));
            }
            c.refs += 1;
            c.tick = self.tick;
            hit.push(*h);
        }
        hit
    }

    /// Turns one private block holding `hash` into a cached one referenced by its
    /// owner. False (block stays private) if that hash is cached already.
    pub fn publish(&mut self, hash: u64) -> bool {
        if !self.caching || self.cached.contains_key(&hash) {
            return false;
        }
        self.tick += 1;
        self.cached.insert(
            hash,
            Cached {
                refs: 1,
                tick: self.tick,
            },
        );
        true
    }

    /// Forgets every block (a restarted engine starts with an empty cache). Only with
    /// no sequence holding blocks.
    pub fn clear(&mut self) {
        self.free = self.total;
        self.cached.clear();
        self.idle.clear();
    }

    /// Drops one reference to a cached block.
    pub fn unref(&mut self, hash: u64) {
        self.tick += 1;
        if let Some(c) = self.cached.get_mut(&hash) {
            c.refs = c.refs.saturating_sub(1);
            c.tick = self.tick;
            if c.refs == 0 {
                self.idle.insert((c.tick, hash));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_blocks_are_shared_then_evicted_lru() {
        let mut kv = Kv::new(4, true);
        assert!(kv.alloc(2));
        assert!(kv.publish(10) && kv.publish(11));
        assert!(!kv.publish(10), "already cached");
        assert_eq!(kv.used(), 2);
        assert_eq!(kv.lookup(&[10, 11, 12]), vec![10, 11]);
        kv.unref(10);
        kv.unref(11);
        kv.unref(10);
        kv.unref(11);
        assert_eq!(kv.used(), 0, "idle cached blocks count as free");
        assert!(kv.alloc(3), "evicts one idle block");
        assert_eq!(
            kv.lookup(&[10]),
            Vec::<u64>::new(),
            "10 was least recently used"
        );
        assert_eq!(kv.lookup(&[11]), vec![11]);
        assert!(!kv.alloc(1), "full");
    }

    #[test]
    fn caching_off_never_hits() {
        let mut kv = Kv::new(4, false);
        assert!(kv.alloc(1));
        assert!(!kv.publish(1));
        assert!(kv.lookup(&[1]).is_empty());
    }
}
