//! A synthetic but valid run directory of any size, for measuring `haq check` at scale
//! (issue 17 item 3). Its shape is a real sim run's (tests/data/report-run, the
//! quickstart): the scenario as recorded, a trace (run start, target, phase edges,
//! each request's request / response / content chunks / finish / usage / done / end
//! lines, one fault, run end), the gateway journal (`upstream_ready`, one
//! `attempt_start` and `attempt_end` per request, `upstream_removed` after the kill)
//! and one journal per worker (`admitted`, `scheduled`, `finished`). The quickstart's
//! phases are stretched to hold `requests` at `rate`: a long baseline, the fault and
//! degraded phases as planned, then a recovery phase as long as the baseline, so most
//! requests are far from the fault. Requests go round robin to w1, w2, w3; none is in
//! flight on w2 when it is killed (the kill catches nothing), and none goes to it
//! afterwards. Deterministic: the same arguments write the same bytes.
//!
//! ```sh
//! cargo run --release --example judge_run -- DIR REQUESTS
//! /usr/bin/time -v target/release/haq check DIR
//! ```

use std::collections::BinaryHeap;
use std::io::Write;
use std::path::Path;

use anyhow::Context;

use crate::trace::files::{GATEWAY_FILE, SCENARIO_FILE, TRACE_FILE, worker_file};

/// What to write.
#[derive(Debug, Clone)]
pub struct RunShape {
    pub requests: u64,
    /// Requests per second (evenly spaced).
    pub rate: f64,
    /// Content deltas per request, one every `itl_us`.
    pub deltas: u32,
    pub itl_us: u64,
}

impl RunShape {
    pub fn new(requests: u64) -> RunShape {
        RunShape {
            requests,
            rate: 100.0,
            deltas: 8,
            itl_us: 20_000,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, Default)]
pub struct Written {
    pub requests: u64,
    pub trace_lines: u64,
    pub journal_lines: u64,
}

const MONO: u64 = 1_000_000_000_000;
const WORKERS: [&str; 3] = ["w1", "w2", "w3"];
/// From the quickstart: the fault phase (the kill 5 s in) and the degraded phase.
const FAULT_S: u64 = 15;
const KILL_AT_S: u64 = 5;
const DEGRADED_S: u64 = 25;

/// One line of a file, due at trace time `t` (the heap pops the earliest first).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Due(std::cmp::Reverse<(u64, u64)>, u8, String);

struct Out {
    trace: std::io::BufWriter<std::fs::File>,
    gateway: std::io::BufWriter<std::fs::File>,
    workers: Vec<std::io::BufWriter<std::fs::File>>,
    heap: BinaryHeap<Due>,
    seq: u64,
    written: Written,
}

impl Out {
    /// `file`: 0 the trace, 1 the gateway journal, 2 + i worker i's journal.
    fn at(&mut self, t: u64, file: u8, line: String) {
        self.seq += 1;
        self.heap
            .push(Due(std::cmp::Reverse((t, self.seq)), file, line));
    }

    /// Writes every line due before `t`.
    fn flush_until(&mut self, t: u64) -> std::io::Result<()> {
        while self.heap.peek().is_some_and(|d| (d.0).0.0 < t) {
            let Some(Due(_, file, line)) = self.heap.pop() else {
                break;
            };
            match file {
                0 => {
                    self.written.trace_lines += 1;
                    writeln!(self.trace, "{line}")?
                }
                1 => {
                    self.written.journal_lines += 1;
                    writeln!(self.gateway, "{line}")?
                }
                i => writeln!(self.workers[usize::from(i - 2)], "{line}")?,
            }
        }
        Ok(())
    }
}

/// Writes the run directory `dir` (created if needed) of `shape`.
pub fn write(dir: &Path, shape: &RunShape) -> anyhow::Result<Written> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let per_phase = shape.requests as f64 / shape.rate;
    let long = ((per_phase - (FAULT_S + DEGRADED_S) as f64) / 2.0)
        .ceil()
        .max(1.0) as u64;
    let scenario = scenario(long, shape.rate)?;
    std::fs::write(dir.join(SCENARIO_FILE), scenario)?;
    let create = |name: &str| -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
        let p = dir.join(name);
        let f = std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
        Ok(std::io::BufWriter::with_capacity(1 << 20, f))
    };
    let mut o = Out {
        trace: create(TRACE_FILE)?,
        gateway: create(GATEWAY_FILE)?,
        workers: WORKERS
            .iter()
            .map(|w| create(&worker_file(w)))
            .collect::<anyhow::Result<_>>()?,
        heap: BinaryHeap::new(),
        seq: 0,
        written: Written::default(),
    };
    let start = 500_000;
    head(&mut o, start);
    let phases = [
        ("baseline", long),
        ("fault", FAULT_S),
        ("degraded", DEGRADED_S),
        ("recovery", long),
    ];
    let mut t0 = start;
    let mut windows = Vec::new();
    for (name, secs) in phases {
        let t1 = t0 + secs * 1_000_000;
        o.at(t0, 0, phase(t0, name, "start"));
        o.at(t1, 0, phase(t1, name, "end"));
        windows.push((name, t0, t1));
        t0 = t1 + 1;
    }
    let load_end = t0;
    let kill = start + (long + KILL_AT_S) * 1_000_000;
    o.at(kill, 0, format!(r#"{{"ev":"fault","t":{kill},"name":"kill-w2","domain":"worker","action":"kill","replica":"w2","pid":102,"verified":true,"detail":"SIGKILL sent; process exited by signal 9"}}"#));
    o.at(
        kill + 40_000,
        1,
        journal(
            kill + 40_000,
            r#""ev":"upstream_removed","worker":"w2","why":"stream broken","cause":"other""#,
        ),
    );
    let gap = (1e6 / shape.rate) as u64;
    let span = 30_000 + u64::from(shape.deltas + 3) * shape.itl_us;
    for i in 0..shape.requests {
        let t = start + 100_000 + i * gap;
        if t + span >= load_end {
            break;
        }
        o.flush_until(t)?;
        // Round robin; w2 neither around its kill nor after it.
        let mut w = (i % 3) as usize;
        if w == 1 && t + span + 1_000_000 >= kill {
            w = if i % 2 == 0 { 0 } else { 2 };
        }
        let Some(&(name, ..)) = windows.iter().find(|p| p.1 <= t && t + span < p.2) else {
            continue; // across a phase edge: none sent
        };
        request(&mut o, shape, (i, name), t, w);
        o.written.requests += 1;
    }
    o.at(
        load_end + 10_000,
        0,
        format!(
            r#"{{"ev":"run_end","t":{},"interrupted":false}}"#,
            load_end + 10_000
        ),
    );
    o.flush_until(u64::MAX)?;
    o.trace.flush()?;
    o.gateway.flush()?;
    for w in &mut o.workers {
        w.flush()?;
    }
    Ok(o.written)
}

/// The quickstart as recorded, its phases stretched: baseline and recovery `long` s.
fn scenario(long: u64, rate: f64) -> anyhow::Result<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
    let sets = [
        format!(
            "phases=[{{name: baseline, duration: {long}s}}, {{name: fault, duration: {FAULT_S}s}}, {{name: degraded, duration: {DEGRADED_S}s}}, {{name: recovery, duration: {long}s}}]"
        ),
        "workload.arrival={process: constant, rate: RATE/s}".replace("RATE", &rate.to_string()),
        format!("protected_load={}/s", rate * 0.75),
    ];
    let plan = crate::plan::load(&path, &sets, None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let json = serde_json::to_string(&plan.scenario)?;
    crate::plan::from_recorded_json(&json).map_err(anyhow::Error::msg)?;
    Ok(json)
}

fn head(o: &mut Out, start: u64) {
    o.at(0, 0, r#"{"ev":"run_start","t":0,"name":"quickstart","seed":42,"wall":"2026-12-02T00:00:00.000Z","mono_ns":1000000000000,"version":"0.1.0"}"#.to_string());
    let replicas: Vec<String> = WORKERS
        .iter()
        .enumerate()
        .map(|(i, w)| {
            format!(
                r#"{{"name":"{w}","url":"http://127.0.0.1:{}","pid":{}}}"#,
                40001 + i,
                101 + i
            )
        })
        .collect();
    o.at(
        10_000,
        0,
        format!(
            r#"{{"ev":"target","t":10000,"url":"http://127.0.0.1:40000/v1","replicas":[{}]}}"#,
            replicas.join(",")
        ),
    );
    for (i, w) in WORKERS.iter().enumerate() {
        let t = 20_000 + i as u64;
        o.at(
            t,
            2 + i as u8,
            journal(
                t,
                &format!(r#""ev":"started","worker":"{w}","pid":{}"#, 101 + i),
            ),
        );
        o.at(
            t + 1000,
            2 + i as u8,
            journal(t + 1000, &format!(r#""ev":"ready","worker":"{w}""#)),
        );
        let u = start - 100_000 + i as u64;
        o.at(
            u,
            1,
            journal(
                u,
                &format!(r#""ev":"upstream_ready","worker":"{w}","why":"ready check passed""#),
            ),
        );
    }
}

fn phase(t: u64, name: &str, edge: &str) -> String {
    format!(r#"{{"ev":"phase","t":{t},"name":"{name}","edge":"{edge}"}}"#)
}

/// A journal line at trace time `t` (µs), on the run's monotonic clock.
fn journal(t: u64, rest: &str) -> String {
    format!(r#"{{"t_ns":{},{rest}}}"#, MONO + t * 1000)
}

/// One request's lines: sent at `t` to worker `w`, completed in full.
fn request(o: &mut Out, s: &RunShape, (i, phase): (u64, &str), t: u64, w: usize) {
    let (id, wn, d) = (format!("r{i:07}"), WORKERS[w], s.deltas);
    let cid = format!("chatcmpl-{wn}-{i}");
    let file = 2 + w as u8;
    o.at(t, 0, format!(r#"{{"ev":"request","t":{t},"id":"{id}","class":"chat","phase":"{phase}","intended":{t},"prompt_tokens":200,"max_tokens":{d},"protected":true}}"#));
    let a = t + 500;
    o.at(a, 1, journal(a, &format!(r#""ev":"attempt_start","req":"{id}","attempt":"{id}/a1","worker":"{wn}","delivered":0"#)));
    o.at(
        a + 500,
        file,
        journal(
            a + 500,
            &format!(r#""ev":"admitted","req":"{id}","attempt":"{id}/a1","prompt_tokens":200"#),
        ),
    );
    o.at(a + 600, file, journal(a + 600, &format!(r#""ev":"scheduled","req":"{id}","attempt":"{id}/a1","cached_tokens":0,"recompute":false"#)));
    let head = t + 20_000;
    o.at(head, 0, format!(r#"{{"ev":"response","t":{head},"id":"{id}","status":200,"worker":"{wn}","attempt":"{id}/a1"}}"#));
    let mut c = head + 10_000;
    for n in 0..d {
        o.at(c, 0, format!(r#"{{"ev":"chunk","t":{c},"id":"{id}","n":{n},"kind":"content","text":" tok{n}","cid":"{cid}"}}"#));
        c += s.itl_us;
    }
    let fin = c;
    o.at(fin, file, journal(fin, &format!(r#""ev":"finished","req":"{id}","attempt":"{id}/a1","reason":"length","events":{d},"generated":{d}"#)));
    o.at(fin + 100, 0, format!(r#"{{"ev":"chunk","t":{},"id":"{id}","n":{d},"kind":"finish","cid":"{cid}","finish":"length"}}"#, fin + 100));
    o.at(fin + 200, 0, format!(r#"{{"ev":"chunk","t":{},"id":"{id}","n":{},"kind":"usage","cid":"{cid}","raw":"{{\"id\":\"{cid}\",\"object\":\"chat.completion.chunk\",\"created\":1795990639,\"model\":\"haq-sim-8b\",\"choices\":[],\"usage\":{{\"completion_tokens\":{d},\"prompt_tokens\":200,\"total_tokens\":{}}}}}"}}"#, fin + 200, d + 1, d + 200));
    o.at(
        fin + 300,
        0,
        format!(
            r#"{{"ev":"chunk","t":{},"id":"{id}","n":{},"kind":"done"}}"#,
            fin + 300,
            d + 2
        ),
    );
    o.at(fin + 400, 1, journal(fin + 400, &format!(r#""ev":"attempt_end","req":"{id}","attempt":"{id}/a1","worker":"{wn}","result":"finished","delivered":{d}"#)));
    o.at(fin + 500, 0, format!(r#"{{"ev":"end","t":{},"id":"{id}","outcome":"completed","tokens":{d},"done":true,"finish":"length","status":200,"counted":{d},"usage":{{"prompt":200,"completion":{d}}}}}"#, fin + 500));
}
