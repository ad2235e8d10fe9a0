//! Files a workload reads: empirical length distributions (a CSV column) and recorded
//! traces to replay (Mooncake JSONL, or CSV). Loaded once, with the scenario, into
//! memory the run shares; every problem names the file, the line and the value.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::scenario::{Dist, Scenario, TraceFormat};

/// One recorded request.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayEntry {
    /// Offset from the trace's first request, µs (before `time_scale`).
    pub at_us: u64,
    pub input: u32,
    pub output: u32,
    /// Mooncake block hashes (512-token blocks): equal ids, equal prompt blocks.
    pub hash_ids: Arc<[u32]>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Replay {
    pub entries: Vec<ReplayEntry>,
    /// Offset of the last entry (µs).
    pub span_us: u64,
}

/// Everything the files of a scenario hold.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// Values of each empirical distribution, keyed by `file#column`.
    pub empirical: BTreeMap<String, Arc<Vec<u32>>>,
    pub replay: Option<Arc<Replay>>,
    /// The files read, to keep a copy with the run (M10).
    pub files: Vec<String>,
    pub loaded: bool,
}

pub fn empirical_key(file: &str, column: Option<&str>) -> String {
    format!("{file}#{}", column.unwrap_or(""))
}

/// A problem in an input file: the scenario field that names it and the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct InputError {
    pub field: String,
    pub value: String,
    pub reason: String,
}

/// Reads every file the scenario's workload names (paths already resolved).
pub fn load(s: &Scenario) -> Result<Inputs, InputError> {
    let mut inputs = Inputs {
        loaded: true,
        ..Default::default()
    };
    if let crate::scenario::MixRef::Inline(mix) = &s.workload.mix {
        for (i, c) in mix.classes.iter().enumerate() {
            let mut dists = vec![
                (
                    format!("workload.mix.classes[{i}].prompt_tokens"),
                    &c.prompt_tokens,
                ),
                (
                    format!("workload.mix.classes[{i}].output_tokens"),
                    &c.output_tokens,
                ),
            ];
            if let Some(p) = &c.shared_prefix {
                dists.push((
                    format!("workload.mix.classes[{i}].shared_prefix.tokens"),
                    &p.tokens,
                ));
            }
            if let Some(se) = &c.session {
                dists.push((
                    format!("workload.mix.classes[{i}].session.turns"),
                    &se.turns,
                ));
            }
            for (field, d) in dists {
                let Dist::Empirical(e) = d else { continue };
                let key = empirical_key(&e.file, e.column.as_deref());
                if inputs.empirical.contains_key(&key) {
                    continue;
                }
                let err = |reason: String| InputError {
                    field: format!("{field}.empirical.file"),
                    value: e.file.clone(),
                    reason,
                };
                let values = read_column(Path::new(&e.file), e.column.as_deref()).map_err(err)?;
                inputs.empirical.insert(key, Arc::new(values));
                inputs.files.push(e.file.clone());
            }
        }
    }
    if let Some(t) = &s.workload.arrival.trace {
        let p = Path::new(&t.file);
        let r = match t.format {
            TraceFormat::Mooncake => read_mooncake(p),
            TraceFormat::Csv => read_trace_csv(p),
        }
        .map_err(|reason| InputError {
            field: "workload.arrival.trace.file".into(),
            value: t.file.clone(),
            reason,
        })?;
        inputs.replay = Some(Arc::new(r));
        inputs.files.push(t.file.clone());
    }
    Ok(inputs)
}

fn open(p: &Path) -> Result<String, String> {
    std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
}

fn whole(v: &str, at: &str) -> Result<u32, String> {
    let t = v.trim();
    t.parse::<u32>()
        .ok()
        .or_else(|| {
            t.parse::<f64>()
                .ok()
                .filter(|f| f.is_finite() && *f >= 0.0 && *f <= u32::MAX as f64)
                .map(|f| f.round() as u32)
        })
        .ok_or_else(|| format!("{at}: `{v}` is not a non-negative whole number"))
}

type Csv = csv::Reader<std::io::Cursor<Vec<u8>>>;

/// A CSV reader over the whole file and its header row.
fn csv_reader(p: &Path) -> Result<(Csv, csv::StringRecord), String> {
    let text = open(p)?;
    let mut r = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(std::io::Cursor::new(text.into_bytes()));
    let headers = r
        .headers()
        .map_err(|e| format!("{}: {e}", p.display()))?
        .clone();
    Ok((r, headers))
}

/// Values of one column of a CSV with a header row (the first column by default).
pub fn read_column(p: &Path, column: Option<&str>) -> Result<Vec<u32>, String> {
    let (mut r, headers) = csv_reader(p)?;
    let col = match column {
        None => 0,
        Some(c) => headers.iter().position(|h| h == c).ok_or_else(|| {
            format!(
                "{}: no column `{c}` (columns: {})",
                p.display(),
                headers.iter().collect::<Vec<_>>().join(", ")
            )
        })?,
    };
    let mut out = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let at = format!("{} line {}", p.display(), i + 2);
        let rec = rec.map_err(|e| format!("{at}: {e}"))?;
        let v = rec
            .get(col)
            .ok_or_else(|| format!("{at}: missing column {}", col + 1))?;
        let n = whole(v, &at)?;
        if n == 0 {
            return Err(format!("{at}: lengths must be at least 1"));
        }
        out.push(n);
    }
    if out.is_empty() {
        return Err(format!("{}: no rows", p.display()));
    }
    Ok(out)
}

fn finish(mut entries: Vec<ReplayEntry>, p: &Path) -> Result<Replay, String> {
    if entries.is_empty() {
        return Err(format!("{}: no requests", p.display()));
    }
    entries.sort_by_key(|e| e.at_us);
    let first = entries[0].at_us;
    for e in &mut entries {
        e.at_us -= first;
    }
    let span_us = entries.last().map(|e| e.at_us).unwrap_or(0);
    Ok(Replay { entries, span_us })
}

#[derive(serde::Deserialize)]
struct MooncakeLine {
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    #[serde(default)]
    hash_ids: Vec<u32>,
}

/// Mooncake's trace format: one JSON object per line, `timestamp` in milliseconds.
pub fn read_mooncake(p: &Path) -> Result<Replay, String> {
    let text = open(p)?;
    let mut entries = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let l: MooncakeLine = serde_json::from_str(line)
            .map_err(|e| format!("{} line {}: {e}", p.display(), i + 1))?;
        if !(l.timestamp.is_finite() && l.timestamp >= 0.0) {
            return Err(format!(
                "{} line {}: bad timestamp {}",
                p.display(),
                i + 1,
                l.timestamp
            ));
        }
        entries.push(ReplayEntry {
            at_us: (l.timestamp * 1000.0) as u64,
            input: l.input_length.max(1),
            output: l.output_length.max(1),
            hash_ids: l.hash_ids.into(),
        });
    }
    finish(entries, p)
}

fn timestamp_us(v: &str, at: &str) -> Result<u64, String> {
    let t = v.trim();
    if let Ok(ms) = t.parse::<f64>()
        && ms.is_finite()
        && ms >= 0.0
    {
        return Ok((ms * 1000.0) as u64);
    }
    // Azure LLM inference traces: `2023-11-16 18:15:46.6805900` (7 fraction digits).
    let (main, frac) = t.split_once('.').unwrap_or((t, ""));
    let dt = chrono::NaiveDateTime::parse_from_str(main, "%Y-%m-%d %H:%M:%S").map_err(|_| {
        format!("{at}: timestamp `{v}` is neither milliseconds nor `YYYY-MM-DD HH:MM:SS[.frac]`")
    })?;
    let micros: u64 = format!("{frac:0<6}")[..6].parse().unwrap_or(0);
    let secs = dt.and_utc().timestamp();
    u64::try_from(secs)
        .map(|s| s * 1_000_000 + micros)
        .map_err(|_| format!("{at}: timestamp `{v}` is before 1970"))
}

/// A CSV trace: timestamp, input and output length columns (names in the docs).
pub fn read_trace_csv(p: &Path) -> Result<Replay, String> {
    let (mut r, headers) = csv_reader(p)?;
    let find = |names: &[&str]| {
        headers
            .iter()
            .position(|h| names.iter().any(|n| h.eq_ignore_ascii_case(n)))
            .ok_or_else(|| {
                format!(
                    "{}: no column named one of {}",
                    p.display(),
                    names.join(", ")
                )
            })
    };
    let ts = find(&["timestamp", "time", "arrival_time"])?;
    let input = find(&[
        "input_length",
        "contexttokens",
        "prompt_tokens",
        "input_tokens",
    ])?;
    let output = find(&["output_length", "generatedtokens", "output_tokens"])?;
    let mut entries = Vec::new();
    for (i, rec) in r.records().enumerate() {
        let at = format!("{} line {}", p.display(), i + 2);
        let rec = rec.map_err(|e| format!("{at}: {e}"))?;
        let get = |c: usize| rec.get(c).unwrap_or("");
        entries.push(ReplayEntry {
            at_us: timestamp_us(get(ts), &at)?,
            input: whole(get(input), &at)?.max(1),
            output: whole(get(output), &at)?.max(1),
            hash_ids: Arc::from(Vec::new()),
        });
    }
    finish(entries, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str, text: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("haq-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        let p = d.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn mooncake_and_csv_traces() {
        let p = tmp(
            "m.jsonl",
            "{\"timestamp\": 1000, \"input_length\": 700, \"output_length\": 20, \"hash_ids\": [1, 2]}\n{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 10, \"hash_ids\": [1]}\n",
        );
        let r = read_mooncake(&p).expect("read");
        assert_eq!(r.entries[0].input, 600, "sorted by time");
        assert_eq!((r.entries[1].at_us, r.span_us), (1_000_000, 1_000_000));
        assert_eq!(&*r.entries[1].hash_ids, &[1, 2]);
        let p = tmp(
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.9951690,396,109\n",
        );
        let r = read_trace_csv(&p).expect("azure");
        assert_eq!(r.entries[1].at_us, 4_314_579);
        assert_eq!((r.entries[1].input, r.entries[1].output), (396, 109));
        let p = tmp(
            "b.csv",
            "timestamp,input_length,output_length\n0,5,6\n250,7,x\n",
        );
        let e = read_trace_csv(&p).expect_err("bad value");
        assert!(e.contains("line 3") && e.contains("`x`"), "{e}");
    }

    #[test]
    fn columns() {
        let p = tmp("l.csv", "prompt,output\n100,7\n250,9\n");
        assert_eq!(read_column(&p, Some("output")).expect("col"), vec![7, 9]);
        assert_eq!(read_column(&p, None).expect("first"), vec![100, 250]);
        let e = read_column(&p, Some("nope")).expect_err("missing");
        assert!(
            e.contains("no column `nope`") && e.contains("prompt, output"),
            "{e}"
        );
    }
}
