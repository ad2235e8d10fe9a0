//! The fault rules of one path and their combined effect ([`PathRules`]), as every
//! connection of that path applies them.

use std::time::Duration;

/// One fault rule on a path. Several may be active at once (their effects combine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Forward nothing either way; keep every socket open.
    Blackhole,
    /// Add this latency to every byte, both ways.
    Delay(Duration),
    /// At most this many bytes per second, each way.
    Throttle(u64),
    /// Abort connections with RST (existing ones at once, new ones on accept).
    Reset,
    /// Close connections with FIN (existing ones at once, new ones on accept).
    Close,
}

/// How a connection is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    Reset,
    Close,
}

/// The combined effect of the active rules, as every connection applies it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PathRules {
    /// Bumped on every change; connections acknowledge the epoch they applied.
    pub epoch: u64,
    pub blackhole: bool,
    pub delay: Duration,
    pub throttle: Option<u64>,
    pub cut: Option<Cut>,
}

impl PathRules {
    pub(super) fn combine(epoch: u64, rules: impl Iterator<Item = Rule>) -> PathRules {
        let mut r = PathRules {
            epoch,
            ..Default::default()
        };
        for rule in rules {
            match rule {
                Rule::Blackhole => r.blackhole = true,
                Rule::Delay(d) => r.delay += d,
                Rule::Throttle(b) => r.throttle = Some(r.throttle.map_or(b, |t| t.min(b))),
                Rule::Reset => r.cut = Some(Cut::Reset),
                Rule::Close => r.cut = r.cut.or(Some(Cut::Close)),
            }
        }
        r
    }
}
