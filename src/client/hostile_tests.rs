//! How the client classifies what is not the target's doing (haq's own host out of a
//! resource: `local`) and what is, though the target answered (a protocol violation:
//! data after `[DONE]`, a line, event or stream past `client.limits`) — issue 15 items
//! 1, 5 and 6. The same cases against real sockets: tests/it/hostile.rs.

use std::io;

use super::bounds::Limits;
use super::stream::{Cut, StreamState};
use super::transport::SendFail;
use super::{classify_body_error, h1};
use crate::trace::{ChunkRef, LocalDetail, Outcome};
use crate::wire::io::LocalErrno;

fn h1_fail(connect: bool, head: bool, errno: i32) -> SendFail {
    SendFail::H1(h1::SendError {
        connect,
        head,
        err: io::Error::from_raw_os_error(errno),
    })
}

#[test]
fn a_send_that_fails_on_haqs_own_host_is_local_and_says_which_limit() {
    for l in LocalErrno::ALL {
        for connect in [true, false] {
            let f = h1_fail(connect, false, l.raw());
            assert_eq!(f.outcome(), Outcome::Local, "{l:?}");
            let text = f.text();
            let d = LocalDetail::parse(&text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(d.errno, l, "{text}");
            assert!(d.limit.is_some(), "the open-file limit is recorded: {text}");
        }
    }
    let text = h1_fail(true, false, libc::EMFILE).text();
    assert!(
        text.starts_with("EMFILE (haq's open-file limit ran out) nofile="),
        "{text}"
    );
    assert!(text.contains("Too many open files"), "{text}");
}

#[test]
fn what_the_peer_did_stays_the_targets() {
    use Outcome::*;
    for (connect, head, errno, want) in [
        (true, false, libc::ECONNREFUSED, Refused),
        (true, false, libc::EHOSTUNREACH, Refused),
        (true, false, libc::ETIMEDOUT, ConnectTimeout),
        (false, false, libc::ECONNRESET, Reset),
        (false, true, libc::EPROTO, BadHead),
    ] {
        let f = h1_fail(connect, head, errno);
        assert_eq!(f.outcome(), want, "{errno}");
        assert!(LocalDetail::parse(&f.text()).is_none(), "{}", f.text());
    }
    let cut = classify_body_error(&io::Error::from_raw_os_error(libc::ENOBUFS));
    assert!(
        matches!(&cut, Cut::Failed(Outcome::Local, d) if d.starts_with("ENOBUFS")),
        "{cut:?}"
    );
    let cut = classify_body_error(&io::Error::from_raw_os_error(libc::ECONNRESET));
    assert!(matches!(cut, Cut::Failed(Outcome::Reset, _)), "{cut:?}");
}

const DELTA: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n";
const FINISH: &str =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";

/// Feeds `pieces` to a stream bounded by `limits`; stops at a limit as the read loop
/// does. Returns the state and the cut a limit made, if one did.
fn feed(limits: &Limits, pieces: &[&[u8]]) -> (StreamState, Option<Cut>) {
    let mut st = StreamState::bounded(false, limits);
    let mut emit = |_: ChunkRef<'_>| {};
    for (t, p) in pieces.iter().enumerate() {
        st.on_bytes(t as u64, "r", p, &mut emit);
        if let Some(c) = st.over_limit() {
            return (st, Some(c));
        }
    }
    st.on_eof(99, "r", &mut emit);
    (st, None)
}

#[test]
fn deltas_after_done_are_not_a_clean_completion() {
    let l = Limits::default();
    let after = format!("{DELTA}{FINISH}data: [DONE]\n\n{}", DELTA.repeat(5));
    let (st, cut) = feed(&l, &[after.as_bytes()]);
    assert!(cut.is_none());
    let e = st.conclude(Cut::Eof);
    assert_eq!(e.outcome, Outcome::AfterDone, "{e:?}");
    assert_eq!(
        e.detail.as_deref(),
        Some("5 data events (5 output deltas) after [DONE], the first chunk 3")
    );
    // A second [DONE] is data after [DONE] too.
    let twice = format!("{DELTA}{FINISH}data: [DONE]\n\ndata: [DONE]\n\n");
    let (st, _) = feed(&l, &[twice.as_bytes()]);
    assert_eq!(st.conclude(Cut::Eof).outcome, Outcome::AfterDone);
    // Keep-alive comments after [DONE], then the end: a clean completion.
    let clean = format!("{DELTA}{FINISH}data: [DONE]\n\n: ping\n\n");
    let (st, _) = feed(&l, &[clean.as_bytes()]);
    assert_eq!(st.conclude(Cut::Eof).outcome, Outcome::Completed);
}

#[test]
fn a_body_that_goes_on_after_done_is_after_done_and_one_that_only_does_not_end_is_complete() {
    let l = Limits::default();
    let grace = std::time::Duration::from_secs(2);
    // Comments still coming at the end of the grace: an endless tail.
    let tail = format!("{DELTA}{FINISH}data: [DONE]\n\n{}", ": x\n\n".repeat(3));
    let (st, _) = feed(&l, &[tail.as_bytes()]);
    let cut = st.after_done_cut(grace);
    assert!(
        matches!(&cut, Cut::Failed(Outcome::AfterDone, d) if d.starts_with("still sending 2s after [DONE] (0 events, 3 comments")),
        "{cut:?}"
    );
    assert_eq!(st.conclude(cut).outcome, Outcome::AfterDone);
    // Nothing after [DONE], the body just not closed: complete, and says so.
    let quiet = format!("{DELTA}{FINISH}data: [DONE]\n\n");
    let (st, _) = feed(&l, &[quiet.as_bytes()]);
    let cut = st.after_done_cut(grace);
    let e = st.conclude(cut);
    assert_eq!(e.outcome, Outcome::Completed, "{e:?}");
    assert!(
        e.detail
            .as_deref()
            .is_some_and(|d| d.contains("did not end within 2s of [DONE]")),
        "{e:?}"
    );
}

#[test]
fn a_line_an_event_or_a_stream_past_its_limit_is_oversized_whatever_came_before() {
    let l = Limits {
        line: 1000,
        event: 3000,
        stream: 20_000,
        ..Limits::default()
    };
    // A line without an end, in 512-byte reads, after a complete answer.
    let head = format!("{DELTA}{FINISH}data: [DONE]\n\ndata: ");
    let junk = [b'a'; 512];
    let mut pieces: Vec<&[u8]> = vec![head.as_bytes()];
    pieces.extend(std::iter::repeat_n(&junk[..], 10));
    let (st, cut) = feed(&l, &pieces);
    let cut = cut.expect("over the line limit");
    let Cut::Failed(Outcome::Oversized, d) = &cut else {
        panic!("{cut:?}")
    };
    assert!(
        d.starts_with("an SSE line longer than client.limits.line (1000B): ")
            && d.contains("it began \"data: aaaa"),
        "{d}"
    );
    assert!(d.len() < 400, "a bounded prefix: {d}");
    assert_eq!(st.conclude(cut).outcome, Outcome::Oversized);
    // An event of many lines, each within the line limit.
    let line = format!("data: {}\n", "b".repeat(900));
    let (_, cut) = feed(&l, &[line.repeat(4).as_bytes()]);
    assert!(
        matches!(&cut, Some(Cut::Failed(Outcome::Oversized, d)) if d.contains("client.limits.event (3000B)")),
        "{cut:?}"
    );
    // Small events, one after another, past the stream limit.
    let many = DELTA.repeat(400);
    let (_, cut) = feed(&l, &[many.as_bytes()]);
    assert!(
        matches!(&cut, Some(Cut::Failed(Outcome::Oversized, d)) if d.contains("client.limits.stream (20000B)")),
        "{cut:?}"
    );
    // Within every limit: as unbounded.
    let ok = format!("{DELTA}{FINISH}data: [DONE]\n\n");
    let (st, cut) = feed(&l, &[ok.as_bytes()]);
    assert!(cut.is_none());
    assert_eq!(st.conclude(Cut::Eof).outcome, Outcome::Completed);
}
