//! Property tests of the parsers haq points at hostile input (issue 15 item 9): the SSE
//! parser, the chunked-framing decoder, the scenario loader and the trace reader.
//! Each never panics on any input and agrees with itself however the input is split.
//! Bounded: `PROPTEST_CASES` cases each (default 256 here); a longer run is
//! `PROPTEST_CASES=100000 cargo test --release --test it fuzz::` (docs/performance.md).

use proptest::prelude::*;

use haq::client::h1::chunked::Decoder;
use haq::wire::sse::{SseItem, SseParser, parse_all};

fn cases() -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases: n,
        // No file of regressions in the source tree: a failure prints its input.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// `bytes` cut at the given points (each taken modulo the length).
fn pieces(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|c| if bytes.is_empty() { 0 } else { c % bytes.len() })
        .collect();
    at.sort_unstable();
    at.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for a in at.into_iter().chain([bytes.len()]) {
        out.push(bytes[prev..a].to_vec());
        prev = a;
    }
    out
}

fn parse_pieces(ps: &[Vec<u8>]) -> Vec<SseItem> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for x in ps {
        p.push(x, &mut out);
    }
    p.finish(&mut out);
    out
}

/// An SSE stream of data events and comments with mixed line endings.
fn sse_stream() -> impl Strategy<Value = (Vec<u8>, Vec<String>)> {
    let line = "[^\r\n]{0,40}";
    let ending = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    prop::collection::vec((line, ending.clone(), ending, any::<bool>()), 0..12).prop_map(|evs| {
        let mut bytes = Vec::new();
        let mut datas = Vec::new();
        for (text, e1, e2, comment) in evs {
            if comment {
                bytes.extend_from_slice(format!(": {text}{e1}").as_bytes());
            } else {
                // CR then LF would be one line ending, not the blank line.
                let e2 = if e1 == "\r" { "\r" } else { e2 };
                bytes.extend_from_slice(format!("data: {text}{e1}{e2}").as_bytes());
                datas.push(text);
            }
        }
        (bytes, datas)
    })
}

fn datas(items: &[SseItem]) -> Vec<String> {
    items
        .iter()
        .filter_map(|i| match i {
            SseItem::Event(e) => Some(e.data.clone()),
            _ => None,
        })
        .collect()
}

proptest! {
    #![proptest_config(cases())]

    /// Any bytes, any split: the same items as parsing them whole, and no panic.
    #[test]
    fn sse_any_bytes_any_split(bytes in prop::collection::vec(any::<u8>(), 0..600),
                               cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let whole = parse_all(&bytes);
        prop_assert_eq!(parse_pieces(&pieces(&bytes, &cuts)), whole);
    }

    /// A well-formed stream gives back exactly its data payloads, however it is split
    /// and whatever its line endings.
    #[test]
    fn sse_events_come_back_whole((bytes, want) in sse_stream(),
                                  cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let got = datas(&parse_pieces(&pieces(&bytes, &cuts)));
        prop_assert_eq!(got, want);
    }

    /// Any bytes fed to the chunked decoder in any pieces: an error or data, never a
    /// panic, never more data out than bytes in.
    #[test]
    fn chunked_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..600),
                         cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let mut d = Decoder::default();
        let mut out = 0usize;
        for p in pieces(&bytes, &cuts) {
            match d.decode(&p, &mut |x: &[u8]| out += x.len()) {
                Ok(_) => {}
                Err(_) => break,
            }
        }
        prop_assert!(out <= bytes.len());
    }

    /// A body framed in random chunks decodes to itself under any split, stops exactly
    /// at its end (what follows is not its), and says it is done.
    #[test]
    fn chunked_round_trip(chunks in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..80), 0..8),
                          tail in prop::collection::vec(any::<u8>(), 0..20),
                          cuts in prop::collection::vec(any::<usize>(), 0..12)) {
        let mut framed = Vec::new();
        for c in &chunks {
            framed.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            framed.extend_from_slice(c);
            framed.extend_from_slice(b"\r\n");
        }
        framed.extend_from_slice(b"0\r\n\r\n");
        let end = framed.len();
        framed.extend_from_slice(&tail);
        let mut d = Decoder::default();
        let mut body = Vec::new();
        let mut consumed = 0;
        for p in pieces(&framed, &cuts) {
            if d.done() {
                break;
            }
            let n = d.decode(&p, &mut |x: &[u8]| body.extend_from_slice(x));
            prop_assert!(n.is_ok(), "{:?}", n);
            consumed += n.unwrap_or(0);
        }
        prop_assert!(d.done());
        prop_assert_eq!(consumed, end);
        prop_assert_eq!(body, chunks.concat());
    }

    /// Any text as a scenario: one error or a plan, never a panic.
    #[test]
    fn scenario_any_text(text in "[ -~\n\t]{0,400}") {
        let _ = haq::plan::load_str(&text, "fuzz.yaml", std::path::Path::new("."), &[], None);
    }

    /// The quickstart with bytes changed here and there: one error or a plan.
    #[test]
    fn scenario_mutated(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let base = std::fs::read(crate::support::root().join("scenarios/quickstart.yaml"))
            .expect("quickstart");
        let mut b = base.clone();
        for (at, byte) in edits {
            let i = at % b.len();
            b[i] = byte;
        }
        let text = String::from_utf8_lossy(&b);
        let base_dir = crate::support::root().join("scenarios");
        let _ = haq::plan::load_str(&text, "fuzz.yaml", &base_dir, &[], None);
    }

    /// Any line as a trace line: an event or an error, never a panic; and any file
    /// read line by line by the trace reader likewise.
    #[test]
    fn trace_any_lines(lines in prop::collection::vec("[ -~]{0,120}", 0..20)) {
        for l in &lines {
            let _ = haq::trace::parse_line(l);
        }
        let dir = std::env::temp_dir().join(format!("haq-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join(format!("{:016x}.jsonl", rand::random::<u64>()));
        std::fs::write(&f, lines.join("\n")).expect("write");
        if let Ok(mut r) = haq::trace::Reader::open(&f, None) {
            let mut n = 0;
            while let Some(x) = r.next_with(|l| l.into_event()) {
                n += 1;
                // A reader never yields more items than the file has lines.
                prop_assert!(n <= lines.len().max(1), "{n} items from {} lines", lines.len());
                if x.is_err() {
                    break;
                }
            }
        }
        let _ = std::fs::remove_file(&f);
    }
}
