//! The bytes waiting to be written one way of a proxied connection ([`Out`]), each
//! with the time it may go (delay rule), paced by a token bucket (throttle rule).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};

use crate::proxy::rules::PathRules;

/// Bytes waiting to be written one way, each with the time it may go (delay rule).
#[derive(Default)]
pub(super) struct Out {
    pub(super) q: VecDeque<(Instant, Bytes)>,
    pub(super) bytes: usize,
    /// Token bucket of a throttle rule: (bytes available, last refill).
    bucket: Option<(f64, Instant)>,
}

impl Out {
    pub(super) fn push(&mut self, due: Instant, b: Bytes) {
        if !b.is_empty() {
            self.bytes += b.len();
            self.q.push_back((due, b));
        }
    }

    /// How many bytes of the front may be written now, or when to look again.
    pub(super) fn ready(
        &mut self,
        now: Instant,
        rules: &PathRules,
    ) -> Result<usize, Option<Instant>> {
        let Some((due, b)) = self.q.front() else {
            return Err(None);
        };
        if rules.blackhole {
            return Err(None);
        }
        if *due > now {
            return Err(Some(*due));
        }
        let Some(rate) = rules.throttle else {
            self.bucket = None;
            return Ok(b.len());
        };
        let rate = rate.max(1) as f64;
        let burst = (rate / 20.0).max(256.0);
        let (tokens, last) = self.bucket.get_or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            Ok((*tokens as usize).min(b.len()))
        } else {
            Err(Some(now + Duration::from_secs_f64((1.0 - *tokens) / rate)))
        }
    }

    pub(super) fn front(&self, n: usize) -> &[u8] {
        self.q
            .front()
            .map_or(&[][..], |(_, b)| &b[..n.min(b.len())])
    }

    pub(super) fn advance(&mut self, n: usize) {
        if let Some((_, b)) = self.q.front_mut() {
            b.advance(n);
            self.bytes -= n;
            if b.is_empty() {
                self.q.pop_front();
            }
        }
        if let Some((tokens, _)) = &mut self.bucket {
            *tokens -= n as f64;
        }
    }
}
