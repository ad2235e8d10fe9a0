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
        // The response's attribution header, else the replica haq's proxy saw serve it.
        opt(r.worker.clone().or_else(|| r.proxy_worker.clone())),
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

#[cfg(test)]
mod tests {
    use crate::check::testkit::{R, Tb, event, plan, us};
    use serde_json::json;

    /// A url target whose responses name no replica: the worker column is the replica
    /// haq's proxy saw serve the request (attributed by its body's marker).
    #[test]
    fn the_worker_column_falls_back_to_the_proxy_attribution() {
        let p = plan(&[]);
        let mut tb = Tb::new().without_journal();
        tb.headers = false;
        tb.phases(&p);
        tb.request(R::ok("r1", "baseline", 2.0, "w2"));
        tb.request(R::ok("r2", "baseline", 2.5, "w3"));
        tb.ev(event(
            json!({"ev": "proxy_request", "t": us(2.001), "replica": "w2",
            "conn": 1, "id": "r1", "by": "marker", "method": "POST",
            "path": "/v1/chat/completions"}),
        ));
        tb.ev(event(
            json!({"ev": "proxy_end", "t": us(2.4), "replica": "w2",
            "conn": 1, "id": "r1", "status": 200, "events": 11, "end": "completed"}),
        ));
        tb.run_end(us(5.0));
        let j = tb.judge(&p);
        let csv = super::render(&j).expect("csv");
        let mut rd = csv::Reader::from_reader(csv.as_bytes());
        let col = super::HEADER
            .iter()
            .position(|h| *h == "worker")
            .expect("col");
        let workers: Vec<String> = rd
            .records()
            .map(|r| r.expect("row")[col].to_string())
            .collect();
        // r2: no header, no upstream request seen: nobody knows.
        assert_eq!(workers, vec!["w2".to_string(), String::new()]);
    }
}
