//! The client went away (M4): the gateway must cancel the upstream attempt, free the
//! slot and start no spare attempt. Judged from the gateway journal or haq's proxy
//! (an upstream connection the gateway closes is a cancel; without a journal the
//! proxy's legs are the attempts); without either the question is not asked of the
//! client's trace (it cannot see upstream).
//!
//! The client leaves when the workload says so (`abandoned`: the class's `abandon`),
//! when haq stops it (`cancelled`: the drain timeout, an interrupt) or when it gives up
//! waiting (a first-token or idle timeout). From then on, the attempt alive (or the
//! first one, when none had started yet) must end within `evidence.cancel_grace`, and
//! no further attempt may start for it.

use super::{Ctx, FindingKind, Out, View};
use crate::check::history::FaultRec;
use crate::trace::Outcome;

pub fn upstream_cancel(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    // haq closed the connection: the client left, was stopped, or gave up waiting.
    if v.r.attempts.is_empty()
        || !matches!(
            v.end.outcome,
            Outcome::Abandoned
                | Outcome::Cancelled
                | Outcome::FirstTokenTimeout
                | Outcome::IdleTimeout
        )
    {
        return;
    }
    if v.end.outcome == Outcome::Abandoned {
        out.left += 1;
    }
    let id = &v.r.id;
    let left = v.end.t;
    let grace = ctx.cancel_grace;
    let ms = |us: u64| format!("{:.0} ms", us as f64 / 1000.0);
    let atts = &v.r.attempts;
    // A later attempt than the first, started once the client was gone: a spare one.
    if let Some(b) = atts.iter().skip(1).find(|a| a.start > left) {
        out.find(
            FindingKind::UpstreamNotCancelled,
            id,
            format!(
                "attempt `{}` on {} started {} after the client went away ({}): a spare attempt for nobody",
                b.id,
                b.worker,
                ms(b.start - left),
                v.end.outcome.as_str()
            ),
        )
        .attempts([b.id.clone()]);
        return;
    }
    // The attempt alive when the client left; or the first, sent after it left.
    let Some(a) = atts.iter().rfind(|a| a.start <= left).or(atts.first()) else {
        return;
    };
    // When the upstream was cancelled: the gateway's own word, a fence, or the end.
    let cancel_t = [a.cancelled, a.fenced].into_iter().flatten().min();
    let cancelled = cancel_t.is_some() || a.result.as_deref() == Some("client_gone");
    let seen = if ctx.journal {
        "the journal goes on, with no end of the attempt"
    } else {
        "haq's proxy saw no end of the upstream request"
    };
    let problem = match cancel_t.or(a.end) {
        Some(e) if e <= left => None,
        Some(e) if e - left <= grace => None,
        Some(e) if cancelled => Some(format!(
            "cancelled only {} after the client went away (grace {})",
            ms(e - left),
            ms(grace)
        )),
        Some(e) => Some(format!(
            "kept running {} after the client went away and ended as {} (grace {})",
            ms(e - left),
            a.result.as_deref().unwrap_or("?"),
            ms(grace)
        )),
        // Still alive by the evidence, which goes on past the grace: never cancelled
        // within it. How long it ran on after is not known (the request's record is
        // closed once the evidence has passed the grace): "at least".
        None if v.r.journal_until >= left + grace => Some(format!(
            "still running at least {} after the client went away ({seen} by then)",
            ms(v.r.journal_until - left)
        )),
        // The evidence stops first (the run ended): nothing to say.
        None => None,
    };
    if let Some(p) = problem {
        out.find(
            FindingKind::UpstreamNotCancelled,
            id,
            format!(
                "attempt `{}` on {}: {p} ({})",
                a.id,
                a.worker,
                v.end.outcome.as_str()
            ),
        )
        .attempts([a.id.clone()]);
    }
}
