//! The other processes' evidence (times in trace µs, stamped on the run's monotonic
//! clock): gateway journal lines, sim worker journal lines, tool executions.

use super::state::Tb;
use crate::check::evidence::{GwItem, GwLine, WkLine};
use crate::wire::journal::{GatewayEntry, Stamped, ToolExecution, WorkerEntry};

impl Tb {
    /// A gateway journal line (dropped when the target has no journal).
    fn gw_line(&mut self, t: u64, item: GwItem) -> &mut Self {
        let t_ns = self.stamp(t);
        if let Some(j) = &mut self.journal {
            j.push(GwLine { t_ns, item });
        }
        self
    }

    /// A gateway journal entry.
    pub fn gw(&mut self, t: u64, e: GatewayEntry) -> &mut Self {
        self.gw_line(t, GwItem::Known(e))
    }

    /// A journal entry of a kind this version does not type (a newer gateway's).
    pub fn gw_other(&mut self, t: u64, fields: serde_json::Value) -> &mut Self {
        let ev = fields["ev"].as_str().unwrap_or_default().to_string();
        self.gw_line(t, GwItem::Other { ev, fields })
    }

    /// The gateway took `w` out of its pool.
    pub fn removed(&mut self, t: u64, w: &str, why: &str) -> &mut Self {
        self.gw(
            t,
            GatewayEntry::UpstreamRemoved {
                worker: w.into(),
                why: why.into(),
                cause: Default::default(),
            },
        )
    }

    /// The gateway put `w` back, its ready check passed.
    pub fn ready(&mut self, t: u64, w: &str) -> &mut Self {
        self.gw(
            t,
            GatewayEntry::UpstreamReady {
                worker: w.into(),
                why: "ready check passed".into(),
            },
        )
    }

    /// Attempt `n` of `req` on `worker`: its start and its end (`failed`: with a
    /// connection reset), each with the deltas delivered by then.
    pub fn attempt(
        &mut self,
        req: &str,
        n: u32,
        worker: &str,
        (start, delivered_at_start): (u64, u32),
        (end, result, delivered_at_end): (u64, &str, u32),
    ) -> &mut Self {
        let attempt = format!("{req}/a{n}");
        self.gw(
            start,
            GatewayEntry::AttemptStart {
                req: req.into(),
                attempt: attempt.clone(),
                worker: worker.into(),
                delivered: delivered_at_start,
            },
        )
        .gw(
            end,
            GatewayEntry::AttemptEnd {
                req: req.into(),
                attempt,
                worker: worker.into(),
                result: result.into(),
                why: (result == "failed").then(|| "stream: connection reset".into()),
                delivered: delivered_at_end,
            },
        )
    }

    /// The gateway journal as the sim gateway writes its file, one JSON line each.
    pub fn journal_lines(&self) -> Vec<String> {
        let line = |l: &GwLine| match &l.item {
            GwItem::Known(entry) => serde_json::to_string(&Stamped {
                t_ns: l.t_ns,
                entry,
            }),
            GwItem::Other { fields, .. } => {
                let mut v = fields.clone();
                v["t_ns"] = l.t_ns.into();
                serde_json::to_string(&v)
            }
        };
        self.journal
            .iter()
            .flatten()
            .map(|l| line(l).expect("journal line"))
            .collect()
    }

    /// A line of worker `w`'s journal.
    pub fn wk(&mut self, t: u64, w: &str, e: WorkerEntry) -> &mut Self {
        let line = WkLine {
            t_ns: self.stamp(t),
            entry: Some(e),
        };
        match self.workers.iter_mut().find(|(n, _)| n == w) {
            Some((_, v)) => v.push(line),
            None => self.workers.push((w.to_string(), vec![line])),
        }
        self
    }

    /// The tool service ran `create_ticket` for call `call` of logical request `lr`
    /// (or answered it from its idempotency record: `dedup`).
    pub fn tool(
        &mut self,
        t: u64,
        lr: &str,
        call: &str,
        key: &str,
        args: &str,
        dedup: bool,
    ) -> &mut Self {
        let t_ns = self.stamp(t);
        self.tools.get_or_insert_with(Vec::new).push(Stamped {
            t_ns,
            entry: ToolExecution {
                logical_request_id: lr.into(),
                tool_call_id: call.into(),
                idempotency_key: key.into(),
                tool: "create_ticket".into(),
                arguments: args.into(),
                result: "ok".into(),
                deduplicated: dedup,
                attempt: None,
                worker: None,
            },
        });
        self
    }
}
