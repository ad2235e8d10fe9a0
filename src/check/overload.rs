//! Overload (Q10, Q13): beyond the protected envelope the system degrades predictably —
//! it sheds load with explicit, fast rejections (429/503), keeps the requests it admits
//! inside the SLO, and neither cascades into timeouts nor into a retry storm. Rejecting
//! protected traffic while its own offered rate is within the protected load is a
//! capacity failure, not load shedding. The retry storm is counted as upstream
//! requests per client request sent upstream, from the gateway journal's attempts and,
//! journal or not, from haq's own proxy (its upstream requests by request id): both
//! figures against the one bound.

use crate::scenario::words::plural;
use std::collections::HashSet;

use super::facts::{Evidence, GwEntry, Proxied, Req};
use super::latency::{MIN_SAMPLES, PhaseStats};
use super::verdict::{VerdictName, conclude};
use super::{Status, Verdict};
use crate::plan::Plan;
use crate::scenario::{OverloadCriteria, PhaseKind};
use crate::trace::Outcome;
use crate::wire::journal::GatewayEntry;

pub const NAME: VerdictName = VerdictName::Overload;

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 * 100.0 / b as f64
    }
}

pub fn verdict(plan: &Plan, ev: &Evidence, phases: &[PhaseStats]) -> Verdict {
    let over: Vec<_> = ev
        .phases
        .iter()
        .filter(|p| p.kind == PhaseKind::Overload)
        .collect();
    if over.is_empty() {
        let why = if plan.phases.iter().any(|p| p.kind == PhaseKind::Overload) {
            return Verdict::new(
                NAME,
                Status::Unknown,
                "the overload phase never ran (the run ended before it)",
                Vec::new(),
            );
        } else {
            "the scenario has no overload phase"
        };
        return Verdict::new(NAME, Status::NotEvaluated, why, Vec::new());
    }
    let crit = plan.scenario.criteria.overload.clone().unwrap_or_default();
    let mut parts = Vec::new();
    let mut evidence = Vec::new();
    for w in over {
        // Requests haq's interrupt stopped are neither served nor failed.
        let reqs: Vec<&Req> = ev
            .requests
            .iter()
            .filter(|r| r.phase == w.name && r.outcome != Outcome::Interrupted)
            .collect();
        let stats = phases.iter().find(|p| p.name == w.name);
        let (s, line, ev_lines) = judge_phase(plan, &crit, ev, &w.name, w.rate, &reqs, stats);
        evidence.extend(ev_lines);
        parts.push((s, line));
    }
    conclude(NAME, &parts, evidence)
}

/// Judges one overload phase: measure its requests, decide each rule, render.
fn judge_phase(
    plan: &Plan,
    crit: &OverloadCriteria,
    ev: &Evidence,
    name: &str,
    rate: f64,
    reqs: &[&Req],
    stats: Option<&PhaseStats>,
) -> (Status, String, Vec<String>) {
    let slo = &plan.scenario.slo;
    let n = reqs.len() as u64;
    if n < MIN_SAMPLES {
        return (
            Status::Unknown,
            format!(
                "{name}: only {} ended (need {MIN_SAMPLES})",
                plural(n, "request")
            ),
            Vec::new(),
        );
    }
    let m = Shed::measure(reqs, rate);
    let mut ev_lines = m.evidence(plan, name, rate);
    let mut bad = m.cascade(plan, crit);
    admitted_latency(name, slo, stats, &mut ev_lines, &mut bad);
    if let Some(j) = &ev.gateway {
        retry_amplification(name, crit, j, reqs, &mut ev_lines, &mut bad);
    }
    let mut unknown = None;
    if ev.has_proxy {
        let window = ev.phase(name).map_or((0, u64::MAX), |w| (w.start, w.end));
        let legs = ProxyLegs::count(&ev.proxied, reqs, window);
        unknown = legs.judge(name, crit, ev.gateway.is_some(), &mut ev_lines, &mut bad);
    }
    bad.extend(m.protected_shed(plan));
    let (status, line, ev_lines) = m.render(plan, name, rate, &bad, ev_lines);
    match unknown {
        Some(why) if status == Status::Pass => {
            (Status::Unknown, format!("{name}: {why}"), ev_lines)
        }
        _ => (status, line, ev_lines),
    }
}

/// The upstream requests haq's proxy forwarded for one phase's client requests: the
/// retry amplification seen from haq's own vantage point, journal or not (Q10).
struct ProxyLegs {
    /// Upstream requests carrying the id of one of the phase's requests.
    legs: u64,
    /// Client requests with at least one of them (sent upstream).
    sent: u64,
    /// Upstream requests during the phase that carry no request id.
    anonymous: u64,
}

impl ProxyLegs {
    fn count(proxied: &[Proxied], reqs: &[&Req], (start, end): (u64, u64)) -> ProxyLegs {
        let ids: HashSet<&str> = reqs.iter().map(|r| r.id.as_str()).collect();
        let mut sent: HashSet<&str> = HashSet::new();
        let (mut legs, mut anonymous) = (0, 0);
        for p in proxied {
            match p.id.as_deref() {
                Some(id) if ids.contains(id) => {
                    legs += 1;
                    sent.insert(id);
                }
                None if p.t >= start && p.t < end => anonymous += 1,
                _ => {}
            }
        }
        ProxyLegs {
            legs,
            sent: sent.len() as u64,
            anonymous,
        }
    }

    /// Upstream requests per client request sent upstream against the bound: above
    /// it, a retry cascade. Returns why the figure cannot be told, when it cannot and
    /// no journal tells it instead.
    fn judge(
        &self,
        name: &str,
        crit: &OverloadCriteria,
        journal: bool,
        ev_lines: &mut Vec<String>,
        bad: &mut Vec<String>,
    ) -> Option<String> {
        let max = crit.retry_amplification_max;
        if self.sent > 0 {
            let amp = self.legs as f64 / self.sent as f64;
            ev_lines.push(format!(
                "{name}: haq's proxy forwarded {} upstream requests for {} client requests sent upstream ({amp:.2} per request, bound {max:.2})",
                self.legs, self.sent
            ));
            if amp > max {
                bad.push(format!(
                    "{amp:.2} upstream requests per client request at haq's proxy (bound {max:.2}): a retry cascade"
                ));
            }
        }
        if self.anonymous == 0 {
            return None;
        }
        let why = format!(
            "{} upstream requests haq's proxy forwarded during the phase carry no request id: retry amplification cannot be told from the proxy",
            self.anonymous
        );
        ev_lines.push(format!("{name}: {why}"));
        (!journal).then_some(why)
    }
}

/// What one overload phase's requests show.
struct Shed {
    n: u64,
    completed: usize,
    rejected: u64,
    /// Failed otherwise (cancelled too).
    failed: u64,
    timeouts: usize,
    with_retry_after: usize,
    /// p95 time to the rejection (µs).
    rej_p95: Option<u64>,
    prot_n: u64,
    prot_rej: u64,
    /// The protected traffic's share of the offered rate.
    prot_rate: f64,
}

impl Shed {
    fn measure(reqs: &[&Req], rate: f64) -> Shed {
        let n = reqs.len() as u64;
        let rejected: Vec<&&Req> = reqs
            .iter()
            .filter(|r| r.outcome == Outcome::Rejected)
            .collect();
        let failed: Vec<&&Req> = reqs
            .iter()
            .filter(|r| r.failed() || r.outcome == Outcome::Cancelled)
            .collect();
        let timeouts = failed
            .iter()
            .filter(|r| {
                matches!(
                    r.outcome,
                    Outcome::ConnectTimeout
                        | Outcome::FirstTokenTimeout
                        | Outcome::IdleTimeout
                        | Outcome::Cancelled
                )
            })
            .count();
        let prot: Vec<&&Req> = reqs.iter().filter(|r| r.protected).collect();
        let prot_rej = prot
            .iter()
            .filter(|r| r.outcome == Outcome::Rejected)
            .count() as u64;
        Shed {
            n,
            completed: reqs
                .iter()
                .filter(|r| r.outcome == Outcome::Completed)
                .count(),
            rejected: rejected.len() as u64,
            failed: failed.len() as u64,
            timeouts,
            with_retry_after: rejected.iter().filter(|r| r.retry_after.is_some()).count(),
            rej_p95: crate::metrics::p95_us(rejected.iter().map(|r| r.e2e())),
            prot_n: prot.len() as u64,
            prot_rej,
            prot_rate: rate * prot.len() as f64 / n as f64,
        }
    }

    /// The phase's first evidence lines: what was offered and how it ended.
    fn evidence(&self, plan: &Plan, name: &str, rate: f64) -> Vec<String> {
        let Shed {
            n,
            timeouts,
            with_retry_after,
            prot_rej,
            prot_rate,
            ..
        } = *self;
        let protected = plan.scenario.protected_load.0;
        let be_rej = self.rejected - prot_rej;
        let be_n = n - self.prot_n;
        vec![
            format!(
                "{name}: offered {rate:.1}/s ({:.1}× protected_load {}); {n} requests: {} completed, {} rejected ({:.1}%; {with_retry_after} with Retry-After{}), {} failed otherwise ({timeouts} timeouts)",
                rate / protected,
                plan.scenario.protected_load,
                self.completed,
                self.rejected,
                pct(self.rejected, n),
                self.rej_p95
                    .map(|v| format!(", p95 {:.0} ms to the rejection", v as f64 / 1000.0))
                    .unwrap_or_default(),
                self.failed
            ),
            format!(
                "{name}: protected {} requests ({prot_rate:.1}/s offered), {prot_rej} rejected; best-effort {be_n}, {be_rej} rejected",
                self.prot_n
            ),
        ]
    }

    /// Failures instead of rejections, and slow rejections: a cascade.
    fn cascade(&self, plan: &Plan, crit: &OverloadCriteria) -> Vec<String> {
        let slo = &plan.scenario.slo;
        let timeouts = self.timeouts;
        let rej_max_ms = crit.rejection_p95_max.unwrap_or(slo.ttft_p95).as_secs_f64() * 1000.0;
        let mut bad = Vec::new();
        let err = pct(self.failed, self.n);
        if err > slo.error_rate_max.0 * 100.0 {
            bad.push(format!(
                "{err:.1}% of requests failed instead of being rejected ({timeouts} timeouts; SLO ≤ {:.1}%): a cascade, not controlled rejection",
                slo.error_rate_max.0 * 100.0
            ));
        }
        if let Some(v) = self.rej_p95
            && v as f64 / 1000.0 > rej_max_ms
        {
            bad.push(format!(
                "rejections took p95 {:.0} ms (bound {rej_max_ms:.0} ms): load was queued, then refused",
                v as f64 / 1000.0
            ));
        }
        bad
    }

    /// Protected traffic rejected while within the protected load (Q10).
    fn protected_shed(&self, plan: &Plan) -> Option<String> {
        let slo = &plan.scenario.slo;
        let protected = plan.scenario.protected_load.0;
        let Shed {
            prot_rej,
            prot_rate,
            ..
        } = *self;
        (prot_rate <= protected + 1e-9
            && pct(prot_rej, self.prot_n) > slo.rejection_rate_max.0 * 100.0)
            .then(|| format!(
                "{prot_rej} protected requests rejected while protected traffic ({prot_rate:.1}/s) was within protected_load: shedding protected traffic is a capacity failure (Q10)"
            ))
    }

    /// The phase's part of the verdict: PASS naming how it shed, or the rules broken.
    fn render(
        &self,
        plan: &Plan,
        name: &str,
        rate: f64,
        bad: &[String],
        ev_lines: Vec<String>,
    ) -> (Status, String, Vec<String>) {
        if !bad.is_empty() {
            return (
                Status::Fail,
                format!("{name}: {}", bad.join("; ")),
                ev_lines,
            );
        }
        let how = if self.rejected == 0 {
            "absorbed without rejections".to_string()
        } else {
            format!(
                "shed {:.1}% with fast explicit rejections",
                pct(self.rejected, self.n)
            )
        };
        (
            Status::Pass,
            format!(
                "{name}: at {:.1}× protected load, {how}; admitted requests inside the SLO, no cascade",
                rate / plan.scenario.protected_load.0
            ),
            ev_lines,
        )
    }
}

/// The admitted requests' p95 TTFT, ITL and E2E against the SLO: above it, the
/// system queued instead of shedding.
fn admitted_latency(
    name: &str,
    slo: &crate::scenario::Slo,
    stats: Option<&PhaseStats>,
    ev_lines: &mut Vec<String>,
    bad: &mut Vec<String>,
) {
    let Some(s) = stats.filter(|s| s.completed >= MIN_SAMPLES) else {
        return;
    };
    let lim = [
        ("TTFT", s.ttft_ms.p95, slo.ttft_p95.as_secs_f64() * 1000.0),
        ("ITL", s.itl_ms.p95, slo.itl_p95.as_secs_f64() * 1000.0),
        ("E2E", s.e2e_ms.p95, slo.e2e_p95.as_secs_f64() * 1000.0),
    ];
    for (what, v, l) in lim {
        ev_lines.push(format!(
            "{name}: admitted requests p95 {what} {v:.1} ms (SLO {l:.0} ms)"
        ));
        if v > l {
            bad.push(format!(
                "admitted requests p95 {what} {v:.0} ms > {l:.0} ms: the system queued instead of shedding"
            ));
        }
    }
}

/// Gateway attempts per request sent upstream, from the journal: above the bound, a
/// retry cascade.
fn retry_amplification(
    name: &str,
    crit: &OverloadCriteria,
    journal: &[GwEntry],
    reqs: &[&Req],
    ev_lines: &mut Vec<String>,
    bad: &mut Vec<String>,
) {
    let ids: HashSet<&str> = reqs.iter().map(|r| r.id.as_str()).collect();
    let mut attempted: HashSet<&str> = HashSet::new();
    let mut attempts = 0u64;
    for g in journal {
        if let GatewayEntry::AttemptStart { req, .. } = &g.entry
            && ids.contains(req.as_str())
        {
            attempts += 1;
            attempted.insert(req.as_str());
        }
    }
    if attempted.is_empty() {
        return;
    }
    let amp = attempts as f64 / attempted.len() as f64;
    ev_lines.push(format!(
        "{name}: {} for {} sent upstream ({amp:.2} per request, bound {:.2})",
        plural(attempts, "gateway attempt"),
        plural(attempted.len() as u64, "request"),
        crit.retry_amplification_max
    ));
    if amp > crit.retry_amplification_max {
        bad.push(format!(
            "{amp:.2} attempts per request (bound {:.2}): a retry cascade",
            crit.retry_amplification_max
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::testkit::*;

    fn oplan() -> Plan {
        plan(&[
            "faults=[]",
            "phases=[{name: baseline, duration: 10s}, {name: overload, load: 2, duration: 10s}]",
        ])
    }

    fn base(p: &Plan) -> Tb {
        let mut tb = Tb::new();
        tb.phases(p);
        tb.steady("baseline", 1.0, 11.0, 10.0, rr(&["w1", "w2", "w3"]));
        tb
    }

    #[test]
    fn fast_explicit_shedding_with_admitted_work_in_slo_passes() {
        let p = oplan();
        let mut tb = base(&p);
        tb.steady("overload", 11.0, 21.0, 20.0, |i, _| {
            (i % 2 == 0).then_some(["w1", "w2", "w3"][i % 3])
        });
        tb.run_end(us(22.0));
        let j = tb.judge(&p);
        let v = pick(&j, NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.summary.contains("2.0× protected load, shed 50.0%"),
            "{}",
            v.summary
        );
        assert!(
            v.evidence[0].contains("100 with Retry-After"),
            "{:?}",
            v.evidence
        );
        // The overload phase is not held to the Latency envelope.
        assert_eq!(pick(&j, "Latency").status, Status::Pass);
    }

    #[test]
    fn queueing_instead_of_shedding_fails() {
        let p = oplan();
        let mut tb = base(&p);
        for k in 0..200 {
            let t = 11.0 + k as f64 * 0.05;
            tb.request(R::ok(format!("q{k}"), "overload", t, "w1").ttft(200.0 + k as f64 * 20.0));
        }
        tb.run_end(us(30.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("queued instead of shedding"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn cascading_timeouts_fail() {
        let p = oplan();
        let mut tb = base(&p);
        for k in 0..200 {
            let t = 11.0 + k as f64 * 0.05;
            let r = R::ok(format!("t{k}"), "overload", t, "w1");
            tb.request(if k % 3 == 0 {
                r.outcome(Outcome::FirstTokenTimeout)
            } else {
                r
            });
        }
        tb.run_end(us(22.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("a cascade, not controlled rejection"),
            "{}",
            v.summary
        );
    }

    #[test]
    fn a_retry_storm_fails() {
        let p = oplan();
        let mut tb = base(&p);
        tb.steady("overload", 11.0, 21.0, 20.0, rr(&["w1", "w3"]));
        let ids: Vec<String> = tb
            .events
            .iter()
            .filter_map(|e| match e {
                crate::trace::Event::Request { id, phase, .. } if phase == "overload" => {
                    Some(id.clone())
                }
                _ => None,
            })
            .collect();
        for id in ids {
            for a in 2..=3 {
                tb.gw(
                    us(15.0),
                    GatewayEntry::AttemptStart {
                        req: id.clone(),
                        attempt: format!("{id}/a{a}"),
                        worker: "w3".into(),
                        delivered: 0,
                    },
                );
            }
        }
        tb.run_end(us(22.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains("3.00 attempts per request"),
            "{}",
            v.summary
        );
    }

    /// The ids of the overload phase's requests.
    fn overload_ids(tb: &Tb) -> Vec<String> {
        tb.events
            .iter()
            .filter_map(|e| match e {
                crate::trace::Event::Request { id, phase, .. } if phase == "overload" => {
                    Some(id.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// No gateway journal (a `url` target); each overload request forwarded `legs`
    /// times by haq's proxy (the last to w3), `anonymous` more upstream requests with
    /// no request id.
    fn behind_the_proxy(legs: usize, anonymous: usize) -> Tb {
        let p = oplan();
        let mut tb = base(&p).without_journal();
        tb.steady("overload", 11.0, 21.0, 20.0, rr(&["w1", "w3"]));
        for (k, id) in overload_ids(&tb).into_iter().enumerate() {
            for n in 0..legs {
                let conn = (k * legs + n) as u64;
                tb.proxy_req(&id, us(11.0 + k as f64 * 0.05) + n as u64 * MS, "w3", conn);
            }
        }
        for n in 0..anonymous {
            tb.ev(crate::trace::Event::ProxyRequest {
                t: us(12.0) + n as u64 * MS,
                replica: "w1".into(),
                conn: 10_000 + n as u64,
                id: None,
                by: None,
                unattributed: Some(crate::trace::Unattributed::NoMarker),
                attempt: None,
                method: "POST".into(),
                path: "/v1/chat/completions".into(),
            });
        }
        tb.run_end(us(22.0));
        tb
    }

    #[test]
    fn without_a_journal_haqs_proxy_shows_the_retry_storm() {
        let p = oplan();
        let v = pick(&behind_the_proxy(3, 0).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
        assert!(
            v.summary.contains(
                "3.00 upstream requests per client request at haq's proxy (bound 1.25): a retry cascade"
            ),
            "{}",
            v.summary
        );
        assert!(
            v.evidence.iter().any(|e| e.contains(
                "haq's proxy forwarded 600 upstream requests for 200 client requests sent upstream"
            )),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn one_upstream_request_per_client_request_at_the_proxy_passes_without_a_journal() {
        let p = oplan();
        let v = pick(&behind_the_proxy(1, 0).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.evidence
                .iter()
                .any(|e| e.contains("(1.00 per request, bound 1.25)")),
            "{:?}",
            v.evidence
        );
        // A declared bound is the bound the proxy's figure is judged against.
        let p = plan(&[
            "faults=[]",
            "phases=[{name: baseline, duration: 10s}, {name: overload, load: 2, duration: 10s}]",
            "criteria.overload.retry_amplification_max=3.5",
        ]);
        let v = pick(&behind_the_proxy(3, 0).judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
    }

    #[test]
    fn upstream_requests_the_proxy_cannot_attribute_leave_the_amplification_unknown() {
        let p = oplan();
        let v = pick(&behind_the_proxy(1, 5).judge(&p), NAME);
        assert_eq!(v.status, Status::Unknown, "{v:?}");
        assert!(
            v.summary.contains(
                "5 upstream requests haq's proxy forwarded during the phase carry no request id"
            ),
            "{}",
            v.summary
        );
        // A storm among the attributed ones is a FAIL all the same.
        let v = pick(&behind_the_proxy(3, 5).judge(&p), NAME);
        assert_eq!(v.status, Status::Fail, "{v:?}");
    }

    #[test]
    fn the_proxys_figure_is_shown_beside_the_journals() {
        let p = oplan();
        let mut tb = base(&p);
        tb.steady("overload", 11.0, 21.0, 20.0, rr(&["w1", "w3"]));
        for (k, id) in overload_ids(&tb).into_iter().enumerate() {
            tb.proxy_req(&id, us(11.0 + k as f64 * 0.05), "w1", k as u64);
        }
        tb.run_end(us(22.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        let has = |s: &str| v.evidence.iter().any(|e| e.contains(s));
        assert!(
            has("200 gateway attempts for 200 requests"),
            "{:?}",
            v.evidence
        );
        assert!(
            has("haq's proxy forwarded 200 upstream requests"),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn clients_that_leave_on_purpose_are_no_cascade() {
        let p = oplan();
        let mut tb = base(&p);
        for k in 0..200 {
            let t = 11.0 + k as f64 * 0.05;
            let r = R::ok(format!("a{k}"), "overload", t, ["w1", "w3"][k % 2]);
            tb.request(if k % 3 == 0 {
                r.outcome(Outcome::Abandoned)
            } else {
                r
            });
        }
        tb.run_end(us(22.0));
        let v = pick(&tb.judge(&p), NAME);
        assert_eq!(v.status, Status::Pass, "{v:?}");
        assert!(
            v.evidence[0].contains("0 failed otherwise"),
            "{:?}",
            v.evidence
        );
    }

    #[test]
    fn no_overload_phase_is_not_evaluated() {
        let p = plan(&[]);
        let v = pick(&standard(&p).judge(&p), NAME);
        assert_eq!(v.status, Status::NotEvaluated);
    }

    #[test]
    fn the_schedule_offers_the_overload_phase_its_own_rate() {
        let p = plan(&[
            "faults=[]",
            "phases=[{name: baseline, duration: 10s}, {name: overload, load: 3, duration: 10s}, {name: degraded, duration: 10s}]",
        ]);
        assert_eq!(p.phases[1].rate, 30.0);
        let mut n = [0usize; 3];
        for r in crate::workload::Schedule::new(&p).expect("schedule") {
            n[r.phase] += 1;
        }
        assert!(n[0].abs_diff(100) <= 1 && n[2].abs_diff(100) <= 1, "{n:?}");
        assert!(n[1].abs_diff(300) <= 1, "{n:?}");
    }

    #[test]
    fn an_overload_phase_must_offer_more_than_the_protected_load() {
        let e = crate::plan::load_str(
            BASE,
            "hand.yaml",
            std::path::Path::new("."),
            &["phases[1]={name: overload, rate: 5/s, duration: 5s}".into()],
            None,
        )
        .expect_err("invalid");
        assert!(
            e.to_string()
                .contains("must offer more than protected_load"),
            "{e}"
        );
    }
}
