//! Whether a plan's peak load fits haq's open-file limit (issue 15 item 1). Every
//! request in flight holds a socket in haq's process — three when it passes haq's own
//! proxy (the sim's workers always; a `url` replica with a `listen` address): the
//! client's connection, and the proxy's accepted and upstream ones. A run that runs
//! out fails requests with EMFILE that are haq's, not the target's; it is judged
//! INVALID (`check::validity`), but a plan that cannot fit even when every request
//! takes the time the scenario plans for it is refused before anything starts.
//!
//! The planned time of a request is `slo.e2e_p95` (the scenario says requests should
//! end within it), at most the whole load; in flight at the peak: the peak offered rate
//! times that (Little's law) plus three standard deviations of Poisson arrivals, or
//! `workload.arrival.max_concurrency` when smaller.

use super::Plan;
use crate::scenario::TargetKind;
use crate::wire::fds::FdLimit;

/// Descriptors haq keeps for itself: the trace, journals, pipes of its children, the
/// proxies' listeners, the runtime.
pub const RESERVED_FDS: u64 = 64;
/// More reserved per replica (its proxy listener, its process's pipes, admin clients).
pub const RESERVED_PER_REPLICA: u64 = 8;

/// What a plan needs at its peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Need {
    pub peak_rate: f64,
    pub request_s: f64,
    /// Requests in flight at the peak.
    pub in_flight: u64,
    /// Sockets each holds in haq's process.
    pub per_request: u64,
    pub warm: u64,
    pub reserved: u64,
}

impl Need {
    pub fn of(plan: &Plan) -> Need {
        let total = plan.total.as_secs_f64();
        let peak_rate = plan
            .phases
            .iter()
            .map(|p| p.rate)
            .fold(plan.profile.max_over(0.0, total.max(1e-3)), f64::max);
        let request_s = plan.scenario.slo.e2e_p95.as_secs_f64().min(total);
        let mean = peak_rate * request_s;
        let mut in_flight = (mean + 3.0 * mean.sqrt()).ceil() as u64;
        if let Some(cap) = plan.scenario.workload.arrival.max_concurrency {
            in_flight = in_flight.min(u64::from(cap));
        }
        let t = &plan.scenario.target;
        let proxied =
            t.kind == TargetKind::Sim || plan.replica_decls.iter().any(|d| d.listen.is_some());
        let replicas = plan.replica_decls.len() as u64;
        Need {
            peak_rate,
            request_s,
            in_flight,
            per_request: if proxied { 3 } else { 1 },
            warm: u64::from(plan.scenario.client.warm_connections),
            reserved: RESERVED_FDS + RESERVED_PER_REPLICA * replicas,
        }
    }

    /// Descriptors in all: warm connections are the requests' own once load runs.
    pub fn fds(&self) -> u64 {
        let proxy = (self.per_request - 1) * self.in_flight;
        self.in_flight.max(self.warm) + proxy + self.reserved
    }

    /// `Err` with what to change when `limit` cannot hold it.
    pub fn check(&self, limit: FdLimit) -> Result<(), String> {
        if self.fds() <= limit.soft {
            return Ok(());
        }
        let sockets = if self.per_request == 3 {
            "3 sockets in haq's process (its connection, two at haq's proxy)"
        } else {
            "1 socket in haq's process"
        };
        Err(format!(
            "the plan needs about {} open files at its peak and haq's open-file limit is {limit}: \
             {:.1} req/s × {:.1}s (slo.e2e_p95) ≈ {} requests in flight, each holding {sockets}, \
             {} warm connections, {} kept for haq itself. Raise the hard limit (`ulimit -Hn` as root, \
             systemd LimitNOFILE=, docker --ulimit nofile=), or lower the rate, \
             workload.arrival.max_concurrency or slo.e2e_p95",
            self.fds(),
            self.peak_rate,
            self.request_s,
            self.in_flight,
            self.warm,
            self.reserved,
        ))
    }
}

/// Checks that `plan` fits `limit` (haq's open-file limit, raised to the hard limit:
/// `wire::fds::raise_fd_limit`); no limit known, no check.
pub fn fit(plan: &Plan, limit: Option<FdLimit>) -> Result<(), String> {
    limit.map_or(Ok(()), |l| Need::of(plan).check(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        super::super::load_str(text, "t.yaml", std::path::Path::new("."), &[], None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn url(rate: &str, e2e: &str, extra: &str) -> Plan {
        plan(&format!(
            "name: t\ntarget: {{kind: url, url: 'http://127.0.0.1:9/v1'{extra}}}\nworkload:\n  mix: {{classes: [{{name: c, prompt_tokens: 8, output_tokens: 8}}]}}\n  arrival: {{process: constant, rate: {rate}}}\nprotected_load: {rate}\nslo: {{ttft_p95: 1s, itl_p95: 1s, e2e_p95: {e2e}}}\nphases: [{{name: baseline, duration: 60s}}]\n"
        ))
    }

    const LIMIT: FdLimit = FdLimit {
        soft: 1024,
        hard: 1024,
    };

    #[test]
    fn a_plan_whose_peak_fits_the_limit_passes_and_one_that_cannot_is_refused_naming_it() {
        // 20/s × 10 s ≈ 200 in flight (+3σ): one socket each.
        let n = Need::of(&url("20/s", "10s", ""));
        assert_eq!((n.per_request, n.in_flight), (1, 243), "{n:?}");
        assert!(n.check(LIMIT).is_ok(), "{n:?}");
        // 200/s × 10 s ≈ 2000 in flight: not in 1024.
        let n = Need::of(&url("200/s", "10s", ""));
        let e = n.check(LIMIT).expect_err("too many");
        assert!(e.contains("needs about 2199 open files"), "{e}");
        assert!(
            e.contains("haq's open-file limit is 1024 (hard limit 1024)"),
            "{e}"
        );
        assert!(e.contains("200.0 req/s × 10.0s (slo.e2e_p95)"), "{e}");
        assert!(
            n.check(FdLimit {
                soft: 4096,
                hard: 4096
            })
            .is_ok()
        );
    }

    #[test]
    fn a_concurrency_cap_bounds_the_need_and_haqs_proxy_triples_it() {
        let capped = plan(
            "name: t\ntarget: {kind: url, url: 'http://127.0.0.1:9/v1'}\nworkload:\n  mix: {classes: [{name: c, prompt_tokens: 8, output_tokens: 8}]}\n  arrival: {process: constant, rate: 200/s, max_concurrency: 300}\nprotected_load: 200/s\nslo: {ttft_p95: 1s, itl_p95: 1s, e2e_p95: 10s}\nphases: [{name: baseline, duration: 60s}]\n",
        );
        let n = Need::of(&capped);
        assert_eq!(n.in_flight, 300);
        assert!(n.check(LIMIT).is_ok(), "{n:?}");
        // The sim: every request passes haq's proxy in front of its worker.
        let sim = plan(
            "name: t\ntarget: {kind: sim}\nworkload:\n  mix: {classes: [{name: c, prompt_tokens: 8, output_tokens: 8}]}\n  arrival: {process: constant, rate: 20/s}\nprotected_load: 20/s\nslo: {ttft_p95: 1s, itl_p95: 1s, e2e_p95: 10s}\nphases: [{name: baseline, duration: 60s}]\n",
        );
        let n = Need::of(&sim);
        assert_eq!(n.per_request, 3);
        assert_eq!(n.fds(), 243 * 3 + RESERVED_FDS + 3 * RESERVED_PER_REPLICA);
        // A short run never has more in flight than it sends.
        let short = Need::of(&url("200/s", "600s", ""));
        assert_eq!(short.request_s, 60.0);
    }

    #[test]
    fn every_shipped_scenario_fits_the_usual_default_of_1024_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).expect("scenarios").flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "yaml") {
                let plan = crate::plan::load(&p, &[], None).unwrap_or_else(|e| panic!("{e}"));
                let need = Need::of(&plan);
                assert!(need.check(LIMIT).is_ok(), "{}: {need:?}", p.display());
                n += 1;
            }
        }
        assert!(n >= 5, "{n} scenarios");
    }
}
