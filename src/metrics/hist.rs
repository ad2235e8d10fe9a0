//! hdrhistogram helpers: every latency is recorded in µs into a histogram; percentiles
//! are reported in ms. Error-adjusted histograms record a failed request at
//! [`INF_US`], reported as `"inf"`: with 10% failures, p95 is +inf, whatever the
//! successful requests did.

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

/// Upper bound of every histogram: one hour in µs. Values above are clamped.
pub const MAX_US: u64 = 3_600_000_000;
/// A failed request in an error-adjusted histogram.
pub const INF_US: u64 = MAX_US;

/// A histogram of µs values, 1 µs .. 1 h, 3 significant digits.
pub fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("constant histogram bounds are valid")
}

/// A smaller histogram for per-second intervals (2 significant digits).
pub fn interval_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 2).expect("constant histogram bounds are valid")
}

/// Records `v` µs (clamped to 1 µs .. 1 h).
#[inline]
pub fn rec(h: &mut Histogram<u64>, v: u64) {
    let _ = h.record(v.clamp(1, MAX_US));
}

/// The p95 of `values` (µs), through the same histogram as every other figure;
/// `None` when there are none.
pub fn p95_us(values: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut h = hist();
    for v in values {
        rec(&mut h, v);
    }
    (!h.is_empty()).then(|| h.value_at_quantile(0.95))
}

#[inline]
pub fn rec_n(h: &mut Histogram<u64>, v: u64, n: u64) {
    let _ = h.record_n(v.clamp(1, MAX_US), n);
}

/// Milliseconds that may be +inf (serialized as the string `"inf"`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Ms(pub f64);

impl Ms {
    pub fn from_us(v: u64) -> Ms {
        if v >= INF_US {
            Ms(f64::INFINITY)
        } else {
            Ms((v as f64).round() / 1000.0)
        }
    }
    pub fn is_inf(self) -> bool {
        self.0.is_infinite()
    }
}

impl Serialize for Ms {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.is_finite() {
            s.serialize_f64(self.0)
        } else {
            s.serialize_str("inf")
        }
    }
}

impl std::fmt::Display for Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_inf() {
            f.write_str("inf")
        } else {
            write!(f, "{:.1}", self.0)
        }
    }
}

/// Percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Pcts {
    pub count: u64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

fn ms(v: u64) -> f64 {
    (v as f64).round() / 1000.0
}

pub fn pcts(h: &Histogram<u64>) -> Pcts {
    Pcts {
        count: h.len(),
        p50: ms(h.value_at_quantile(0.50)),
        p95: ms(h.value_at_quantile(0.95)),
        p99: ms(h.value_at_quantile(0.99)),
        max: ms(h.max()),
    }
}

/// Error-adjusted percentiles: failed requests count as +inf.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EaPcts {
    pub count: u64,
    pub failed: u64,
    pub p50: Ms,
    pub p90: Ms,
    pub p95: Ms,
    pub p99: Ms,
}

pub fn ea_pcts(h: &Histogram<u64>) -> EaPcts {
    let at = |q| {
        if h.is_empty() {
            Ms(0.0)
        } else {
            Ms::from_us(h.value_at_quantile(q))
        }
    };
    EaPcts {
        count: h.len(),
        failed: h.count_between(INF_US, INF_US),
        p50: at(0.50),
        p90: at(0.90),
        p95: at(0.95),
        p99: at(0.99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_push_error_adjusted_percentiles_to_inf() {
        let mut h = hist();
        for v in 1..=90 {
            rec(&mut h, v * 1000);
        }
        let e = ea_pcts(&h);
        assert_eq!(e.failed, 0);
        assert!((e.p95.0 - 86.0).abs() < 0.1, "{e:?}");
        for _ in 0..10 {
            rec(&mut h, INF_US);
        }
        let e = ea_pcts(&h);
        assert_eq!(e.failed, 10);
        assert!(e.p90.0 < 100.0);
        assert!(e.p95.is_inf());
        assert_eq!(
            serde_json::to_string(&e.p95).ok().as_deref(),
            Some("\"inf\"")
        );
    }
}
