//! The offered rate over time: a profile of linear pieces (constant, ramp, stages),
//! resolved from the scenario's `arrival` section at validation; the workload draws
//! its arrival process on it.

use serde::Serialize;

use crate::scenario::{Arrival, ArrivalProcess, Issue};

/// One linear piece of the rate: `r0` at `start` to `r1` at `end` (seconds from the
/// start of load, req/s). The last piece's end rate holds forever after.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Piece {
    pub start: f64,
    pub end: f64,
    pub r0: f64,
    pub r1: f64,
}

impl Piece {
    fn rate_at(&self, t: f64) -> f64 {
        if self.end <= self.start {
            return self.r1;
        }
        self.r0 + (self.r1 - self.r0) * ((t - self.start) / (self.end - self.start))
    }
}

/// The offered rate over time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateProfile {
    pub pieces: Vec<Piece>,
}

impl RateProfile {
    pub fn constant(rate: f64) -> Self {
        RateProfile {
            pieces: vec![Piece {
                start: 0.0,
                end: 0.0,
                r0: rate,
                r1: rate,
            }],
        }
    }

    /// Builds the profile an `arrival` section describes. `default` is the rate when
    /// none is given (`protected_load`); `total` the run length (s).
    pub fn from_arrival(a: &Arrival, default: f64, total: f64) -> Result<Self, Issue> {
        let given = [a.rate.is_some(), a.ramp.is_some(), !a.stages.is_empty()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(Issue::new(
                "workload.arrival",
                "rate/ramp/stages",
                "give one of `rate`, `ramp` or `stages`, not several",
            ));
        }
        if let Some(r) = &a.ramp {
            let over = r.over.map(|d| d.as_secs_f64()).unwrap_or(total);
            if over <= 0.0 {
                return Err(Issue::new(
                    "workload.arrival.ramp.over",
                    over,
                    "must be greater than 0",
                ));
            }
            return Ok(RateProfile {
                pieces: vec![Piece {
                    start: 0.0,
                    end: over,
                    r0: r.from.0,
                    r1: r.to.0,
                }],
            });
        }
        if !a.stages.is_empty() {
            let mut pieces = Vec::new();
            let mut t = 0.0;
            for (i, s) in a.stages.iter().enumerate() {
                let f = format!("workload.arrival.stages[{i}]");
                let d = s.duration.as_secs_f64();
                if d <= 0.0 {
                    return Err(Issue::new(
                        format!("{f}.duration"),
                        s.duration,
                        "must be greater than 0",
                    ));
                }
                let (r0, r1) = match (s.rate, s.ramp) {
                    (Some(r), None) => (r.0, r.0),
                    (None, Some([a, b])) => (a.0, b.0),
                    _ => {
                        return Err(Issue::missing(
                            f,
                            "each stage needs exactly one of `rate` or `ramp: [from, to]`",
                        ));
                    }
                };
                pieces.push(Piece {
                    start: t,
                    end: t + d,
                    r0,
                    r1,
                });
                t += d;
            }
            return Ok(RateProfile { pieces });
        }
        Ok(RateProfile::constant(
            a.rate.map(|r| r.0).unwrap_or(default),
        ))
    }

    pub fn rate_at(&self, t: f64) -> f64 {
        let p = self
            .pieces
            .iter()
            .find(|p| t < p.end)
            .or(self.pieces.last());
        p.map(|p| p.rate_at(t.max(p.start))).unwrap_or(0.0)
    }

    /// Pieces clipped to `[a, b]`, the hold after the last piece included.
    fn spans(&self, a: f64, b: f64) -> impl Iterator<Item = (f64, f64, f64, f64)> + '_ {
        let hold = self.pieces.last().map(|p| Piece {
            start: p.end.max(p.start),
            end: f64::INFINITY,
            r0: p.r1,
            r1: p.r1,
        });
        self.pieces
            .iter()
            .copied()
            .chain(hold)
            .filter_map(move |p| {
                let (x, y) = (a.max(p.start), b.min(p.end));
                (y > x).then(|| (x, y, p.rate_at(x), p.rate_at(y)))
            })
    }

    /// Expected number of arrivals in `[a, b]`.
    pub fn area(&self, a: f64, b: f64) -> f64 {
        self.spans(a, b)
            .map(|(x, y, r0, r1)| (r0 + r1) / 2.0 * (y - x))
            .sum()
    }

    pub fn min_over(&self, a: f64, b: f64) -> f64 {
        self.spans(a, b)
            .map(|(_, _, r0, r1)| r0.min(r1))
            .fold(f64::INFINITY, f64::min)
    }

    pub fn max_over(&self, a: f64, b: f64) -> f64 {
        self.spans(a, b)
            .map(|(_, _, r0, r1)| r0.max(r1))
            .fold(0.0, f64::max)
    }

    /// The time `t' > t` at which `area` more arrivals are expected, if any.
    pub fn advance(&self, t: f64, mut area: f64) -> Option<f64> {
        for (x, y, rx, ry) in self.spans(t, f64::INFINITY) {
            let seg = if y.is_finite() {
                (rx + ry) / 2.0 * (y - x)
            } else if rx > 0.0 {
                f64::INFINITY
            } else {
                0.0
            };
            if area <= seg {
                let k = if y.is_finite() {
                    (ry - rx) / (y - x)
                } else {
                    0.0
                };
                // k/2·d² + rx·d = area, the stable root for either sign of k
                let disc = (rx * rx + 2.0 * k * area).max(0.0);
                let d = if rx + disc.sqrt() > 0.0 {
                    2.0 * area / (rx + disc.sqrt())
                } else {
                    0.0
                };
                return Some((x + d).min(y));
            }
            area -= seg;
        }
        None
    }
}

/// The gamma process's shape `k` (`burstiness`: 1 = Poisson, smaller = burstier),
/// checked; `None` for the other processes.
pub fn burstiness(a: &Arrival) -> Result<Option<f64>, Issue> {
    if a.process != ArrivalProcess::Gamma {
        return Ok(None);
    }
    let k = a.burstiness.unwrap_or(1.0);
    if !(k.is_finite() && k > 0.0) {
        return Err(Issue::new(
            "workload.arrival.burstiness",
            k,
            "must be greater than 0 (1 = Poisson, smaller = burstier)",
        ));
    }
    Ok(Some(k))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_inverts_the_area() {
        let p = RateProfile {
            pieces: vec![
                Piece {
                    start: 0.0,
                    end: 10.0,
                    r0: 0.0,
                    r1: 10.0,
                },
                Piece {
                    start: 10.0,
                    end: 20.0,
                    r0: 10.0,
                    r1: 10.0,
                },
            ],
        };
        assert!((p.area(0.0, 10.0) - 50.0).abs() < 1e-9);
        assert!(
            (p.area(0.0, 30.0) - 250.0).abs() < 1e-9,
            "the last rate holds"
        );
        for (t, a) in [(0.0, 1.0), (2.0, 5.0), (9.0, 30.0), (15.0, 3.0)] {
            let t2 = p.advance(t, a).expect("reached");
            assert!((p.area(t, t2) - a).abs() < 1e-6, "{t} {a} -> {t2}");
        }
        let falling = RateProfile {
            pieces: vec![Piece {
                start: 0.0,
                end: 10.0,
                r0: 10.0,
                r1: 0.0,
            }],
        };
        assert!(falling.advance(0.0, 49.0).is_some());
        assert_eq!(
            falling.advance(0.0, 51.0),
            None,
            "the rate falls to 0 and holds"
        );
        assert_eq!(falling.min_over(0.0, 5.0), 5.0);
        assert_eq!(p.max_over(0.0, 5.0), 5.0);
    }
}
