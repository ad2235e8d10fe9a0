//! The client went away (M4): the gateway must cancel the upstream attempt, free the
//! slot and start no spare attempt. Judged from the gateway journal or haq's proxy
//! (an upstream connection the gateway closes is a cancel); without either the
//! question is not asked of the client's trace (it cannot see upstream).

use super::{Ctx, FindingKind, Out, View};
use crate::check::history::FaultRec;
use crate::trace::Outcome;

pub fn upstream_cancel(ctx: &Ctx, v: &View, _: &[FaultRec], out: &mut Out) {
    // haq closed the connection: it stopped the request or gave up waiting.
    if v.r.attempts.is_empty()
        || !matches!(
            v.end.outcome,
            Outcome::Cancelled | Outcome::FirstTokenTimeout | Outcome::IdleTimeout
        )
    {
        return;
    }
    let id = &v.r.id;
    let left = v.end.t;
    let grace = ctx.cancel_grace;
    let ms = |us: u64| format!("{:.0} ms", us as f64 / 1000.0);
    if let Some(b) = v.r.attempts.iter().find(|a| a.start > left) {
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
    let Some(a) = v.r.attempts.iter().rfind(|a| a.start <= left) else {
        return;
    };
    // When the upstream was cancelled: the gateway's own word, a fence, or the end.
    let cancel_t = [a.cancelled, a.fenced].into_iter().flatten().min();
    let cancelled = cancel_t.is_some() || a.result.as_deref() == Some("client_gone");
    let problem = match cancel_t.or(a.end) {
        Some(e) if e <= left => None,
        Some(e) if e - left <= grace => None,
        Some(e) if cancelled => Some(format!(
            "cancelled only {} after the client went away (grace {})",
            ms(e - left),
            ms(grace)
        )),
        Some(e) => Some(format!(
            "kept running {} after the client went away and ended as {}",
            ms(e - left),
            a.result.as_deref().unwrap_or("?")
        )),
        // Still alive by the journal, which goes on past the grace: never cancelled.
        None if v.r.journal_until >= left + grace => Some(format!(
            "still running {} after the client went away (the journal goes on, with no end of the attempt)",
            ms(v.r.journal_until - left)
        )),
        // The journal stops first (the run ended): nothing to say.
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
