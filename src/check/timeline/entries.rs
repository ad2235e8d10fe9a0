//! The timeline as people read it: one [`Entry`] per phase start and per fault stage
//! (with the evidence that dates it), and full recovery, in time order.

use super::types::{Entry, FaultTimeline, InFlight, JOURNAL, Mark, Removal, ms};
use crate::check::facts::Evidence;
use crate::check::history::replica_label;
use crate::scenario::words::plural;

/// The rows, as they are written.
struct Rows<'e> {
    ev: &'e Evidence,
    entries: Vec<Entry>,
}

impl Rows<'_> {
    /// A row at `t`, `since` the fault it belongs to, from `m`: (source, detail).
    fn push(&mut self, t: u64, since: Option<u64>, event: String, m: (&str, String)) {
        self.entries.push(Entry {
            t,
            at_s: (self.ev.secs(t) * 1000.0).round() / 1000.0,
            after_fault_ms: since.map(|s| ms(s, t)),
            event,
            source: m.0.to_string(),
            detail: m.1,
        });
    }
}

/// A mark as a row's (source, detail).
fn m(x: &Mark) -> (&str, String) {
    (x.source.as_str(), x.detail.clone())
}

/// Every row of the timeline, in time order (rows at the same time by event name).
pub(super) fn entries(ev: &Evidence, faults: &[FaultTimeline], full: Option<&Mark>) -> Vec<Entry> {
    let mut rows = Rows {
        ev,
        entries: Vec::new(),
    };
    for p in &ev.phases {
        rows.push(
            p.start,
            None,
            format!("phase {} starts", p.name),
            (
                "haq load",
                format!("{:?}, {}/s offered", p.kind, p.rate).to_lowercase(),
            ),
        );
    }
    for f in faults {
        fault_rows(&mut rows, f);
    }
    if let Some(fr) = full {
        let first = faults.first().map(|f| f.injected);
        rows.push(
            fr.t,
            first,
            "full recovery".into(),
            (fr.source.as_str(), fr.detail.clone()),
        );
    }
    let mut entries = rows.entries;
    entries.sort_by(|a, b| a.t.cmp(&b.t).then(a.event.cmp(&b.event)));
    entries
}

/// One fault's rows: injected, detected, traffic removed, in-flight requests settled,
/// the replacement stages, healed, and the end of the degraded interval.
fn fault_rows(rows: &mut Rows<'_>, f: &FaultTimeline) {
    let at = Some(f.injected);
    let inj = rows.ev.faults.iter().find(|x| x.name == f.fault);
    if !f.verified {
        // Not applied: nothing was detected, removed or replaced because of it.
        rows.push(
            f.injected,
            at,
            format!(
                "{} not applied ({} {})",
                f.fault,
                f.action,
                replica_label(&f.replica)
            ),
            (
                "haq fault injector",
                inj.map(|x| x.detail.clone()).unwrap_or_default(),
            ),
        );
        return;
    }
    rows.push(
        f.injected,
        at,
        format!("{} injected ({} {})", f.fault, f.action, f.replica),
        (
            "haq fault injector",
            format!(
                "verified: {}{}",
                f.verified,
                inj.map(|x| format!(" — {}", x.detail)).unwrap_or_default()
            ),
        ),
    );
    if let Some(d) = &f.detected {
        rows.push(d.t, at, format!("{} detected", f.replica), m(d));
    }
    if let Some(r) = &f.removal {
        removal_row(rows, f, r);
    }
    if let Some(s) = f.in_flight.settled {
        rows.push(
            s,
            at,
            "in-flight requests settled".into(),
            ("client trace", settled(&f.in_flight)),
        );
    }
    replacement_rows(rows, f);
    if let Some(h) = &f.healed {
        rows.push(h.t, at, format!("{} healed", f.fault), m(h));
    }
    if let Some(h) = &f.heal_unverified {
        rows.push(h.t, at, format!("heal of {} not verified", f.fault), m(h));
    }
    rows.push(
        f.degraded_until,
        at,
        "degraded interval ends".into(),
        (
            "haq load",
            format!(
                "{:.1}s degraded after {}",
                ms(f.injected, f.degraded_until) / 1000.0,
                f.fault
            ),
        ),
    );
}

/// When traffic stopped reaching the endpoint (or went on until the heal).
fn removal_row(rows: &mut Rows<'_>, f: &FaultTimeline, r: &Removal) {
    let detail = match &r.last {
        Some(l) => format!(
            "last of {} routed to {} after the fault: {}",
            plural(r.routed_after_fault, "request"),
            f.replica,
            l.detail
        ),
        None => format!("no request was routed to {} after the fault", f.replica),
    };
    let event = if r.until_heal {
        format!("{} got traffic until the heal", f.replica)
    } else {
        format!("traffic removed from {}", f.replica)
    };
    rows.push(
        r.t,
        Some(f.injected),
        event,
        (
            r.last
                .as_ref()
                .map(|l| l.source.as_str())
                .or(r.sources.first().map(String::as_str))
                .unwrap_or(JOURNAL),
            detail,
        ),
    );
}

/// The replacement stages seen; a healed fault's endpoint comes back itself (no
/// replacement), and its rows say so.
fn replacement_rows(rows: &mut Rows<'_>, f: &FaultTimeline) {
    let healed_back = f.healed.is_some() && f.replacement.requested.is_none();
    let stages = [
        ("replacement requested", &f.replacement.requested),
        ("replacement started", &f.replacement.started),
        (
            if healed_back {
                "ready again"
            } else {
                "replacement ready"
            },
            &f.replacement.ready,
        ),
        (
            if healed_back {
                "receiving traffic again"
            } else {
                "replacement receiving traffic"
            },
            &f.replacement.serving,
        ),
        ("replacement failed", &f.replacement.failed),
    ];
    for (label, s) in stages {
        if let Some(s) = s {
            rows.push(
                s.t,
                Some(f.injected),
                format!("{} {label}", f.replica),
                m(s),
            );
        }
    }
}

/// How the requests a fault caught ended: "3 caught: 1 recovered, 1 terminated, 1
/// left by the client or ended by haq" (the last part only when there are any).
fn settled(i: &InFlight) -> String {
    let mut s = format!(
        "{} caught: {} recovered, {} terminated",
        i.caught, i.recovered, i.terminated
    );
    if i.left > 0 {
        s.push_str(&format!(", {} left by the client or ended by haq", i.left));
    }
    s
}
