//! Routing evidence: which requests reached an endpoint, from every source (gateway
//! journal, observers, haq's proxy, attribution headers), and which went elsewhere.

use std::collections::BTreeMap;

use super::types::{HEADER, JOURNAL, Mark, PROXY, mark};
use crate::check::facts::{Evidence, says_routed};
use crate::wire::journal::GatewayEntry;

/// Requests routed to `replica` in `[from, until)`, from every source, in time order:
/// the gateway journal's attempts, observations, haq's proxy's legs and the requests
/// the attribution header names. One request seen by several sources is counted once
/// per attempt ([`one_per_request`]).
pub fn routed_to(ev: &Evidence, replica: &str, from: u64, until: u64) -> Vec<Mark> {
    let mut keyed: Vec<(Option<&str>, Mark)> = ev
        .attempts_to(replica, from, until)
        .map(|(t, req)| {
            let m = mark(t, JOURNAL, format!("attempt of {req} sent to {replica}"));
            (Some(req), m)
        })
        .collect();
    keyed.extend(
        ev.observed(replica, from, says_routed)
            .filter(|o| o.t < until)
            .map(|o| {
                let what = o.detail.clone().unwrap_or_else(|| o.what.clone());
                (None, mark(o.t, &o.source, what))
            }),
    );
    keyed.extend(
        ev.proxied
            .iter()
            .filter(|p| p.replica == replica && p.t >= from && p.t < until)
            .map(|p| {
                let id = p.id.as_deref();
                let what = format!("{} forwarded to {replica}", id.unwrap_or("a request"));
                (id, mark(p.t, PROXY, what))
            }),
    );
    // An attribution header dates a request at its dispatch, before the gateway chose
    // an upstream for it (it may have queued first): a request the journal or haq's
    // proxy saw reach the endpoint is dated by them, wherever that falls.
    let dated: std::collections::HashSet<&str> = ev
        .attempts_to(replica, 0, u64::MAX)
        .map(|(_, req)| req)
        .chain(
            ev.proxied
                .iter()
                .filter(|p| p.replica == replica)
                .filter_map(|p| p.id.as_deref()),
        )
        .collect();
    keyed.extend(
        ev.requests
            .iter()
            .filter(|r| {
                r.worker.as_deref() == Some(replica)
                    && r.dispatch >= from
                    && r.dispatch < until
                    && !dated.contains(r.id.as_str())
            })
            .map(|r| {
                let what = format!("{} served by {replica}", r.id);
                (Some(r.id.as_str()), mark(r.dispatch, HEADER, what))
            }),
    );
    let mut out = one_per_request(keyed);
    out.sort_by_key(|m| m.t);
    out
}

/// The marks of one request id from several sources are the same attempts seen
/// twice (the proxy's leg and the header's answer, the journal's attempt and the
/// proxy's leg): per id, only the marks of the source that saw the most attempts (on
/// a tie, the one that saw it first). Marks without an id are kept.
fn one_per_request(keyed: Vec<(Option<&str>, Mark)>) -> Vec<Mark> {
    let mut out = Vec::new();
    let mut by_id: BTreeMap<&str, BTreeMap<String, Vec<Mark>>> = BTreeMap::new();
    for (id, m) in keyed {
        match id {
            Some(id) => by_id
                .entry(id)
                .or_default()
                .entry(m.source.clone())
                .or_default()
                .push(m),
            None => out.push(m),
        }
    }
    for sources in by_id.into_values() {
        let first = |ms: &Vec<Mark>| ms.iter().map(|m| m.t).min().unwrap_or(u64::MAX);
        if let Some(best) = sources
            .into_values()
            .max_by_key(|ms| (ms.len(), std::cmp::Reverse(first(ms))))
        {
            out.extend(best);
        }
    }
    out
}

/// The first request after `t` routed to another endpoint than `replica`.
pub(super) fn routed_elsewhere(ev: &Evidence, replica: &str, t: u64) -> Option<Mark> {
    let journal = ev.gateway.iter().flatten().find_map(|g| match &g.entry {
        GatewayEntry::AttemptStart { req, worker, .. } if g.t > t && worker != replica => Some(
            mark(g.t, JOURNAL, format!("attempt of {req} sent to {worker}")),
        ),
        _ => None,
    });
    let header = ev
        .requests
        .iter()
        .filter(|r| r.dispatch > t && r.worker.as_deref().is_some_and(|w| w != replica))
        .min_by_key(|r| r.dispatch)
        .map(|r| {
            mark(
                r.dispatch,
                HEADER,
                format!(
                    "{} served by {}",
                    r.id,
                    r.worker.as_deref().unwrap_or_default()
                ),
            )
        });
    let observed = ev
        .observations
        .iter()
        .find(|o| {
            o.t > t && says_routed(&o.what) && o.replica.as_deref().is_some_and(|x| x != replica)
        })
        .map(|o| mark(o.t, &o.source, o.detail.clone().unwrap_or_default()));
    let proxied = ev
        .proxied
        .iter()
        .find(|p| p.t > t && p.replica != replica)
        .map(|p| {
            mark(
                p.t,
                PROXY,
                format!(
                    "{} forwarded to {}",
                    p.id.as_deref().unwrap_or("a request"),
                    p.replica
                ),
            )
        });
    [journal, header, observed, proxied]
        .into_iter()
        .flatten()
        .min_by_key(|m| m.t)
}

/// Which routing evidence this run has.
pub fn routing_sources(ev: &Evidence) -> Vec<String> {
    let mut s = Vec::new();
    if ev.gateway.is_some() {
        s.push(JOURNAL.to_string());
    }
    let mut obs: Vec<String> = ev
        .observations
        .iter()
        .filter(|o| says_routed(&o.what))
        .map(|o| o.source.clone())
        .collect();
    obs.sort();
    obs.dedup();
    s.extend(obs);
    if ev.has_proxy {
        s.push(PROXY.to_string());
    }
    if ev.summary.attributed {
        s.push(HEADER.to_string());
    }
    s
}
