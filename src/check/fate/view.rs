//! One finished request as the checkers read it: its deltas, the writers (generation
//! ids) whose chunks reached the client, and the seams where the output may have
//! changed hands — from chunk ids, from the gateway journal, or from a stall.

use crate::check::history::{ChunkRec, EndRec, RequestRecord};
use crate::trace::ChunkKind;

/// A stall longer than this (and than [`GAP_FACTOR`] × the stream's median gap)
/// between two deltas marks a place where output may have resumed from elsewhere.
pub const MIN_GAP_US: u64 = 500_000;
pub const GAP_FACTOR: u64 = 10;

pub struct View<'a> {
    pub r: &'a RequestRecord,
    pub end: &'a EndRec,
    /// Indices into `r.chunks` of the deltas, in arrival order.
    pub deltas: Vec<usize>,
    /// Consecutive runs of chunks carrying the same generation id.
    pub segs: Vec<Seg>,
}

/// A run of chunks from one writer (one chunk `id`).
#[derive(Debug, Clone)]
pub struct Seg {
    pub cid: String,
    /// Chunk index (`n`) of its first and last chunk.
    pub first_n: u32,
    pub last_n: u32,
    /// Deltas the client had received before this run began.
    pub deltas_before: u32,
    pub deltas: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeamSource {
    /// The chunk `id` changed.
    ChunkId,
    /// The gateway journal shows a new attempt starting after deltas were delivered.
    Journal,
    /// haq's proxy saw another upstream request for the stream start after deltas
    /// were delivered (no gateway journal; the client's stream may show no seam).
    Proxy,
    /// The stream stalled, then went on.
    Stall,
}

/// A place in the delivered output where another attempt may have taken over.
#[derive(Debug, Clone)]
pub struct Seam {
    /// Deltas delivered before the seam.
    pub at: u32,
    pub from: String,
    pub to: String,
    pub source: SeamSource,
}

impl<'a> View<'a> {
    pub fn new(r: &'a RequestRecord) -> Option<View<'a>> {
        let end = r.end.as_ref()?;
        let deltas: Vec<usize> = (0..r.chunks.len())
            .filter(|&i| r.chunks[i].kind.is_delta())
            .collect();
        let mut segs: Vec<Seg> = Vec::new();
        let mut before = 0u32;
        for c in &r.chunks {
            let written = !matches!(
                c.kind,
                ChunkKind::Error | ChunkKind::Done | ChunkKind::Other
            );
            if let (true, Some(cid)) = (written, c.cid.as_deref()) {
                match segs.last_mut() {
                    Some(s) if s.cid == cid => {
                        s.last_n = c.n;
                        s.deltas += u32::from(c.kind.is_delta());
                    }
                    _ => segs.push(Seg {
                        cid: cid.to_string(),
                        first_n: c.n,
                        last_n: c.n,
                        deltas_before: before,
                        deltas: u32::from(c.kind.is_delta()),
                    }),
                }
            }
            before += u32::from(c.kind.is_delta());
        }
        Some(View {
            r,
            end,
            deltas,
            segs,
        })
    }

    pub fn delivered(&self) -> u32 {
        self.deltas.len() as u32
    }

    pub fn delta(&self, i: usize) -> &'a ChunkRec {
        &self.r.chunks[self.deltas[i]]
    }

    pub fn delta_text(&self, i: usize) -> &'a str {
        self.delta(i).text.as_deref().unwrap_or("")
    }

    /// Chunk index of delta `i` (or of the last chunk when `i` is past the end).
    pub fn delta_n(&self, i: usize) -> u32 {
        match self.deltas.get(i) {
            Some(&k) => self.r.chunks[k].n,
            None => self.r.chunks.last().map(|c| c.n).unwrap_or(0),
        }
    }

    /// Delivered text from delta `a` to delta `b` (exclusive), trimmed for evidence.
    pub fn excerpt(&self, a: usize, b: usize) -> String {
        let b = b.min(self.deltas.len());
        let s: String = (a.min(b)..b).map(|i| self.delta_text(i)).collect();
        excerpt(&s)
    }

    /// Distinct writer ids in order of first appearance.
    pub fn writers(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for s in &self.segs {
            if !out.contains(&s.cid.as_str()) {
                out.push(&s.cid);
            }
        }
        out
    }

    /// Seams after at least one delivered delta where another writer took over: chunk
    /// id changes, and attempts (journal, or haq's proxy's upstream requests) started
    /// after delivery (one per position).
    pub fn handovers(&self) -> Vec<Seam> {
        let mut out: Vec<Seam> = Vec::new();
        for w in self.segs.windows(2) {
            if w[1].deltas_before > 0 && w[1].deltas > 0 {
                out.push(Seam {
                    at: w[1].deltas_before,
                    from: w[0].cid.clone(),
                    to: w[1].cid.clone(),
                    source: SeamSource::ChunkId,
                });
            }
        }
        let atts = &self.r.attempts;
        for (i, a) in atts.iter().enumerate().skip(1) {
            if a.delivered_at_start > 0 && !out.iter().any(|s| s.at == a.delivered_at_start) {
                out.push(Seam {
                    at: a.delivered_at_start,
                    from: atts[i - 1].id.clone(),
                    to: a.id.clone(),
                    source: if a.proxy_leg {
                        SeamSource::Proxy
                    } else {
                        SeamSource::Journal
                    },
                });
            }
        }
        out.sort_by_key(|s| s.at);
        out
    }

    /// Handovers plus stalls: every place output may have resumed from elsewhere.
    pub fn seams(&self) -> Vec<Seam> {
        let mut out = self.handovers();
        let gaps: Vec<u64> = self
            .deltas
            .windows(2)
            .map(|w| self.r.chunks[w[1]].t.saturating_sub(self.r.chunks[w[0]].t))
            .collect();
        if gaps.len() >= 3 {
            // The median gap: the middle one of the sorted gaps, found without sorting.
            let mut order = gaps.clone();
            let mid = order.len() / 2;
            let median = *order.select_nth_unstable(mid).1;
            let limit = (median * GAP_FACTOR).max(MIN_GAP_US);
            for (i, g) in gaps.iter().enumerate() {
                let at = i as u32 + 1;
                if *g > limit && !out.iter().any(|s| s.at == at) {
                    out.push(Seam {
                        at,
                        from: String::new(),
                        to: String::new(),
                        source: SeamSource::Stall,
                    });
                }
            }
        }
        out.sort_by_key(|s| s.at);
        out
    }

    /// Time of the first delivered delta.
    pub fn first_delta_t(&self) -> Option<u64> {
        self.deltas.first().map(|&i| self.r.chunks[i].t)
    }
}

/// At most 60 characters of `s`, trimmed, for evidence.
pub fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_string()
    }
}
