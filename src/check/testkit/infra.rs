//! What haq itself writes around the requests (times in µs): phase edges, faults
//! (the engine's own line, or one by name), heals, observers' observations and its
//! proxy's legs and what it saw of a dead replica's path (refused connects, its
//! listener closing, whether its watch runs).

use super::state::{Tb, us};
use crate::trace::{Edge, Event, FaultLine, ProxyEndKind, RefusedHow};

impl Tb {
    /// A phase edge.
    pub fn phase(&mut self, t: u64, name: &str, edge: Edge) -> &mut Self {
        self.ev(Event::Phase {
            t,
            name: name.into(),
            edge,
        })
    }

    /// A fault line as given: every fault writer ends here.
    pub fn fault_as(&mut self, line: FaultLine) -> &mut Self {
        self.ev(Event::Fault(line))
    }

    /// A verified kill of `replica` at `t`; written last, as the engine does.
    pub fn kill(&mut self, t: u64, replica: &str) -> &mut Self {
        self.fault(t, replica, "kill")
    }

    /// A verified, time-triggered fault `action` on `replica` at `t`, named
    /// `<action>-<replica>` (pid 4242, process backend), as the engine writes it.
    pub fn fault(&mut self, t: u64, replica: &str, action: &str) -> &mut Self {
        self.fault_as(FaultLine {
            t,
            name: format!("{action}-{replica}"),
            domain: crate::scenario::FailureDomain::Worker,
            action: serde_json::from_value(action.into()).expect("a fault action"),
            replica: replica.into(),
            pid: Some(4242),
            verified: true,
            detail: "gone".into(),
            backend: Some(crate::scenario::FaultBackend::Process),
            node: None,
            trigger: Some("time".into()),
            triggered: Some(t),
            probe: None,
        })
    }

    /// The plan's fault `name` (a worker kill) on `replica` (`wN`: pid 100 + N)
    /// at `t`, verified or not.
    pub fn inject(&mut self, name: &str, replica: &str, t: u64, verified: bool) -> &mut Self {
        self.inject_as(name, "worker", "kill", replica, t, verified)
    }

    /// As [`Tb::inject`], of failure `domain` and `action`.
    pub fn inject_as(
        &mut self,
        name: &str,
        domain: &str,
        action: &str,
        replica: &str,
        t: u64,
        verified: bool,
    ) -> &mut Self {
        let detail = if verified {
            "SIGKILL sent; process exited by signal 9"
        } else {
            "SIGKILL sent; process still alive after 5s"
        };
        self.fault_as(FaultLine {
            t,
            name: name.into(),
            domain: serde_json::from_value(domain.into()).expect("a failure domain"),
            action: serde_json::from_value(action.into()).expect("a fault action"),
            replica: replica.into(),
            pid: replica[1..].parse::<u32>().ok().map(|i| 100 + i),
            verified,
            detail: detail.into(),
            backend: None,
            node: None,
            trigger: None,
            triggered: None,
            probe: None,
        })
    }

    /// haq healed the fault (SIGCONT, proxy rule removed).
    pub fn heal(&mut self, name: &str, replica: &str, t: u64) -> &mut Self {
        self.ev(Event::Heal {
            t,
            name: name.into(),
            detail: "SIGCONT sent".into(),
            replica: Some(replica.into()),
            verified: Some(true),
        })
    }

    /// An observer (`source`) saw `what` of `replica`.
    pub fn obs(&mut self, t: u64, source: &str, replica: &str, what: &str) -> &mut Self {
        self.ev(Event::Observation {
            t,
            source: source.into(),
            replica: Some(replica.into()),
            what: what.into(),
            detail: None,
        })
    }

    /// haq's proxy forwarded `id` to `replica` on connection `conn`.
    pub fn proxy_req(&mut self, id: &str, t: u64, replica: &str, conn: u64) -> &mut Self {
        self.ev(Event::ProxyRequest {
            t,
            replica: replica.into(),
            conn,
            id: Some(id.into()),
            by: Some(crate::trace::LegBy::Marker),
            unattributed: None,
            attempt: None,
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
        })
    }

    /// How that forwarded request ended at the proxy.
    pub fn proxy_end(
        &mut self,
        id: &str,
        t: u64,
        (replica, conn): (&str, u64),
        end: ProxyEndKind,
    ) -> &mut Self {
        self.proxy_end_after(id, t, (replica, conn), end, None)
    }

    /// As [`Tb::proxy_end`], with the time the replica's first event passed the proxy
    /// (that event held back at a probe point).
    pub fn proxy_end_after(
        &mut self,
        id: &str,
        t: u64,
        leg: (&str, u64),
        end: ProxyEndKind,
        first_event: Option<u64>,
    ) -> &mut Self {
        self.push_leg_end(id, t, leg, end, (first_event, first_event.map(|_| 1)))
    }

    /// How an upstream request ended at the proxy, with when the replica's first event
    /// passed it (none held back).
    pub fn leg_end(
        &mut self,
        id: &str,
        t: u64,
        leg: (&str, u64),
        end: ProxyEndKind,
        first_event: u64,
    ) -> &mut Self {
        self.push_leg_end(id, t, leg, end, (Some(first_event), None))
    }

    fn push_leg_end(
        &mut self,
        id: &str,
        t: u64,
        (replica, conn): (&str, u64),
        end: ProxyEndKind,
        (first_event, held): (Option<u64>, Option<u32>),
    ) -> &mut Self {
        self.ev(Event::ProxyEnd {
            t,
            replica: replica.into(),
            conn,
            id: Some(id.into()),
            attempt: None,
            status: Some(200),
            events: u32::from(first_event.is_some()),
            first_event,
            end,
            held,
        })
    }

    /// haq's proxy in front of every replica (a `url` target with `listen`): no
    /// journal, no attribution header, each request [`Tb::request`] routes recorded
    /// by the proxy; its watch of refused connects on or off (at 0.4 s).
    pub fn behind_proxies(mut self, watching: bool) -> Self {
        self.journal = None;
        self.headers = false;
        self.proxy = true;
        if let Some(Event::Target { replicas, .. }) = self.events.get_mut(1) {
            for (i, r) in replicas.iter_mut().enumerate() {
                r.proxy = Some(format!("127.0.0.1:{}", 9101 + i));
            }
        }
        let detail = if watching {
            "refusals seen (packet socket on lo)"
        } else {
            "cannot be seen: packet socket: Operation not permitted (it needs CAP_NET_RAW)"
        };
        self.ev(Event::ProxyWatch {
            t: us(0.4),
            watching,
            detail: detail.into(),
        });
        self
    }

    /// A connect to `replica`'s closed proxy listener at `t` (s), refused by the
    /// kernel.
    pub fn refused(&mut self, t: f64, replica: &str) -> &mut Self {
        let peer = format!("127.0.0.1:{}", 40000 + self.events.len());
        self.ev(Event::ProxyRefused {
            t: us(t),
            replica: replica.into(),
            peer,
            how: RefusedHow::Refused,
        })
    }

    /// haq's proxy closed (the replica refuses connections) or reopened its listener
    /// at `t` (s).
    pub fn listener(&mut self, t: f64, replica: &str, open: bool) -> &mut Self {
        self.ev(Event::ProxyListener {
            t: us(t),
            replica: replica.into(),
            open,
        })
    }
}
