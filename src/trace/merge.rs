//! The traces of `haq run --agents N` merged into the run's one trace, losslessly: the
//! coordinator's trace (phases, faults, proxy legs, observations) and each agent's
//! (its share of the requests, their chunks and ends) interleaved by time into
//! `trace.jsonl`, every line kept byte for byte, so `haq check` judges the merged run
//! exactly as a single-process one. Every agent stamps on the coordinator's trace clock
//! (`Clock::resumed`), so no time is rewritten. Each input keeps its own order (a
//! trace is written in emit order, which a line stamped a little earlier may follow):
//! the merge takes the input whose next line is earliest, the coordinator first on a
//! tie. A request id seen twice, or one outside its agent's share, fails the merge: the
//! union must be the schedule, each request once.
//!
//! Hand-written (no k-way merge crate): N is small, and lines are copied unparsed but
//! for their `t` and the request lines.
//!
//! Also here: the `agent` observations the coordinator writes (started, done, late,
//! lost), which the validity rule and the report read.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Event;

/// The `source` of the coordinator's observations about its agents.
pub const SOURCE: &str = "agent";

/// What the coordinator saw of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentState {
    /// Spawned, with its share and the start deadline.
    Started,
    /// Exited 0 after sending its share.
    Done,
    /// Not ready by the start deadline: it sent nothing.
    Late,
    /// Died, was killed or exited non-zero: its share was not (all) sent.
    Lost,
}

impl AgentState {
    pub fn what(self) -> &'static str {
        match self {
            AgentState::Started => "agent_started",
            AgentState::Done => "agent_done",
            AgentState::Late => "agent_late",
            AgentState::Lost => "agent_lost",
        }
    }

    fn of(what: &str) -> Option<AgentState> {
        [
            AgentState::Started,
            AgentState::Done,
            AgentState::Late,
            AgentState::Lost,
        ]
        .into_iter()
        .find(|s| s.what() == what)
    }
}

/// An `agent` observation's detail (JSON).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentNote {
    /// `agent-<share>`.
    pub agent: String,
    pub share: u64,
    pub of: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Requests it sent (done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    /// When it was ready, and the start deadline (trace µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_us: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_us: Option<u64>,
    /// Its wall clock against the coordinator's (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_us: Option<i64>,
    /// An agent on another host (a pod): the round trip of the clock exchange its
    /// trace time was set by (µs); its stamps are within half of it of the
    /// coordinator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_rtt_us: Option<u64>,
    /// The drift of its clock from the coordinator's over its share (µs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_drift_us: Option<i64>,
    /// Its pod (an agent of `agents.kubernetes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// Why it was late or lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl AgentNote {
    /// The observation line.
    pub fn event(&self, t: u64, state: AgentState) -> Event {
        Event::Observation {
            t,
            source: SOURCE.into(),
            replica: None,
            what: state.what().into(),
            detail: serde_json::to_string(self).ok(),
        }
    }

    /// An `agent` observation read back; `None` for any other event.
    pub fn read(ev: &Event) -> Option<(AgentState, AgentNote)> {
        let Event::Observation {
            source,
            what,
            detail,
            ..
        } = ev
        else {
            return None;
        };
        if source != SOURCE {
            return None;
        }
        let state = AgentState::of(what)?;
        let note = serde_json::from_str(detail.as_deref()?).ok()?;
        Some((state, note))
    }
}

/// One agent's trace to merge: its share of `count`.
#[derive(Debug, Clone)]
pub struct Part {
    pub share: u64,
    pub count: u64,
    pub trace: PathBuf,
}

/// What a merge did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Merged {
    /// Lines written in all.
    pub lines: u64,
    /// Requests of each part (in the parts' order).
    pub requests: Vec<u64>,
}

/// One input: its next line (with its end) and that line's time.
struct Input {
    lines: BufReader<File>,
    next: Option<(u64, Vec<u8>)>,
    /// `None` for the coordinator's trace.
    part: Option<(usize, u64, u64)>,
}

impl Input {
    /// Reads the next complete line (a torn last line, from a killed agent, is dropped;
    /// a blank line is skipped).
    fn advance(&mut self) -> Result<(), String> {
        loop {
            let mut buf = Vec::new();
            let n = self
                .lines
                .read_until(b'\n', &mut buf)
                .map_err(|e| e.to_string())?;
            if n == 0 || buf.last() != Some(&b'\n') {
                self.next = None;
                return Ok(());
            }
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let t = line_t(&buf)?;
            self.next = Some((t, buf));
            return Ok(());
        }
    }
}

/// A line's `t`: read where haq writes it (`{"ev":"…","t":N`), else by parsing it.
fn line_t(line: &[u8]) -> Result<u64, String> {
    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    let fast = super::line_tag(text).and_then(|tag| {
        let rest = text.get(7 + tag.len()..)?.strip_prefix("\",\"t\":")?;
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        rest.get(..digits)?.parse().ok()
    });
    match fast {
        Some(t) => Ok(t),
        None => super::parse_line(text.trim_end())
            .map(|e| e.t())
            .map_err(|e| e.to_string()),
    }
}

/// Merges the agents' traces into the coordinator's `main` (rewritten in place,
/// through a temporary file renamed over it).
pub fn merge(main: &Path, parts: &[Part]) -> Result<Merged, String> {
    let open = |p: &Path| {
        File::open(p)
            .map(BufReader::new)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    let mut inputs = vec![Input {
        lines: open(main)?,
        next: None,
        part: None,
    }];
    for (i, p) in parts.iter().enumerate() {
        inputs.push(Input {
            lines: open(&p.trace)?,
            next: None,
            part: Some((i, p.share, p.count)),
        });
    }
    for i in &mut inputs {
        i.advance()?;
    }
    let tmp = main.with_extension("jsonl.merging");
    let mut out =
        BufWriter::new(File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?);
    let mut merged = Merged {
        lines: 0,
        requests: vec![0; parts.len()],
    };
    let mut ids = HashSet::new();
    while let Some(k) = earliest(&inputs) {
        let input = &mut inputs[k];
        let Some((_, line)) = input.next.take() else {
            break;
        };
        check_request(&line, input.part, &mut ids, &mut merged)?;
        out.write_all(&line).map_err(|e| e.to_string())?;
        merged.lines += 1;
        input.advance()?;
    }
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    std::fs::rename(&tmp, main).map_err(|e| format!("{}: {e}", main.display()))?;
    Ok(merged)
}

/// The input whose next line is earliest (the first such on a tie).
fn earliest(inputs: &[Input]) -> Option<usize> {
    inputs
        .iter()
        .enumerate()
        .filter_map(|(k, i)| i.next.as_ref().map(|(t, _)| (*t, k)))
        .min()
        .map(|(_, k)| k)
}

/// A request line: its id seen once in all, and inside its agent's share.
fn check_request(
    line: &[u8],
    part: Option<(usize, u64, u64)>,
    ids: &mut HashSet<String>,
    merged: &mut Merged,
) -> Result<(), String> {
    let text = std::str::from_utf8(line).map_err(|e| e.to_string())?;
    if super::line_tag(text) != Some("request") {
        return Ok(());
    }
    let Ok(Event::Request { id, probe, .. }) = super::parse_line(text.trim_end()) else {
        return Err(format!(
            "a request line that does not read: {}",
            text.trim_end()
        ));
    };
    if let (Some((i, share, count)), None) = (part, &probe) {
        let index = id.strip_prefix('r').and_then(|d| d.parse::<u64>().ok());
        if index.map(|x| x % count.max(1)) != Some(share) {
            return Err(format!(
                "request {id} in the trace of agent {share} of {count}: not its share"
            ));
        }
        merged.requests[i] += 1;
    }
    if !ids.insert(id.clone()) {
        return Err(format!("request {id} appears twice in the agents' traces"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(
            &p,
            lines.iter().map(|l| format!("{l}\n")).collect::<String>(),
        )
        .expect("write");
        p
    }

    fn req(t: u64, id: &str) -> String {
        format!(
            r#"{{"ev":"request","t":{t},"id":"{id}","class":"c","phase":"p","intended":{t},"prompt_tokens":1,"max_tokens":1,"protected":true}}"#
        )
    }

    fn temp() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "haq-merge-{}-{}",
            std::process::id(),
            crate::wire::mono_ns()
        ));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn interleaves_by_time_keeping_every_line_and_each_inputs_order() {
        let d = temp();
        let main = write(
            &d,
            "trace.jsonl",
            &[
                r#"{"ev":"run_start","t":0,"name":"x","seed":1,"wall":"2026-01-01T00:00:00Z","mono_ns":5,"version":"0"}"#,
                r#"{"ev":"phase","t":100,"name":"p","edge":"start"}"#,
                r#"{"ev":"run_end","t":900,"interrupted":false}"#,
            ],
        );
        let a0 = write(
            &d,
            "a0.jsonl",
            &[&req(150, "r000000"), &req(140, "r000002")],
        );
        let a1 = write(&d, "a1.jsonl", &[&req(120, "r000001")]);
        // Killed mid-write: a torn last line, with no line end.
        let mut torn = std::fs::OpenOptions::new()
            .append(true)
            .open(&a1)
            .expect("open");
        torn.write_all(br#"{"ev":"request","t":1"#).expect("torn");
        let parts = [
            Part {
                share: 0,
                count: 2,
                trace: a0,
            },
            Part {
                share: 1,
                count: 2,
                trace: a1,
            },
        ];
        let m = merge(&main, &parts).expect("merged");
        assert_eq!(m.requests, vec![2, 1]);
        let text = std::fs::read_to_string(&main).expect("read");
        let ts: Vec<u64> = text
            .lines()
            .map(|l| line_t(l.as_bytes()).expect("t"))
            .collect();
        // r000002 (t 140) stays after r000000 (t 150): its own input's order.
        assert_eq!(ts, vec![0, 100, 120, 150, 140, 900]);
        assert_eq!(
            m.lines, 6,
            "the torn last line of a killed agent is dropped"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_request_twice_or_outside_its_share_fails_the_merge() {
        let d = temp();
        let main = write(
            &d,
            "trace.jsonl",
            &[r#"{"ev":"run_end","t":900,"interrupted":false}"#],
        );
        let a0 = write(&d, "a0.jsonl", &[&req(150, "r000000")]);
        let twice = write(&d, "a1.jsonl", &[&req(150, "r000000")]);
        let parts = [
            Part {
                share: 0,
                count: 1,
                trace: a0.clone(),
            },
            Part {
                share: 0,
                count: 1,
                trace: twice,
            },
        ];
        let e = merge(&main, &parts).expect_err("twice");
        assert!(e.contains("twice"), "{e}");
        let wrong = [Part {
            share: 1,
            count: 2,
            trace: a0,
        }];
        let e = merge(&main, &wrong).expect_err("share");
        assert!(e.contains("not its share"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn agent_notes_read_back_and_other_observations_do_not() {
        let n = AgentNote {
            agent: "agent-1".into(),
            share: 1,
            of: 3,
            sent: Some(4),
            ..Default::default()
        };
        let ev = n.event(7, AgentState::Lost);
        assert_eq!(AgentNote::read(&ev), Some((AgentState::Lost, n)));
        let other = Event::Observation {
            t: 1,
            source: "gateway".into(),
            replica: None,
            what: "agent_lost".into(),
            detail: None,
        };
        assert_eq!(AgentNote::read(&other), None);
    }
}
