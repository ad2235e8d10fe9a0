//! requests.csv: one row per finished request, in order of intended send time — the
//! raw material for anyone's own analysis. Times in seconds since the start of load.

use crate::check::Judgement;
use crate::check::facts::Req;

pub const HEADER: [&str; 22] = [
    "id",
    "class",
    "phase",
    "protected",
    "intended_s",
    "dispatch_s",
    "first_delta_s",
    "end_s",
    "ttft_ms",
    "e2e_ms",
    "status",
    "worker",
    "attempt",
    "outcome",
    "tokens",
    "deltas",
    "finish",
    "retry_after",
    "caught_stage",
    "caught_by",
    "detail",
    "probe",
];

fn row(j: &Judgement, r: &Req) -> [String; 22] {
    let base = j.facts.load_start;
    let s = |t: u64| format!("{:.6}", (t as f64 - base as f64) / 1e6);
    let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
    let opt = |o: Option<String>| o.unwrap_or_default();
    [
        r.id.clone(),
        r.class.clone(),
        r.phase.clone(),
        r.protected.to_string(),
        s(r.intended),
        s(r.dispatch),
        opt(r.first_delta.map(s)),
        s(r.end),
        opt(r.ttft().map(ms)),
        ms(r.e2e()),
        opt(r.status.map(|x| x.to_string())),
        opt(r.worker.clone()),
        opt(r.attempt.map(|x| x.to_string())),
        r.outcome.as_str().into(),
        r.tokens.to_string(),
        r.deltas.to_string(),
        opt(r.finish.clone()),
        opt(r.retry_after.clone()),
        opt(r.caught.map(|c| c.0.as_str().to_string())),
        opt(r
            .caught
            .and_then(|c| j.facts.faults.get(c.1))
            .map(|f| f.name.clone())),
        opt(r.detail.clone()),
        opt(r.probe.clone()),
    ]
}

pub fn render(j: &Judgement) -> Result<String, csv::Error> {
    let mut reqs: Vec<&Req> = j.facts.requests.iter().collect();
    reqs.sort_by(|a, b| a.intended.cmp(&b.intended).then(a.id.cmp(&b.id)));
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(HEADER)?;
    for r in reqs {
        w.write_record(row(j, r))?;
    }
    let bytes = w.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}
