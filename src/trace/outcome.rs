//! How a stream ended, from the client's side ([`Outcome`]), and who it is charged to:
//! the target (a failure), haq (`local`: haq's own host ran out of something; the run
//! is INVALID), or no one (haq stopped it, the client left on purpose).
//!
//! A `local` end carries its errno and haq's open-file limit at the start of its
//! `detail` ([`local_detail`]), so that judging — later, in another process — can say
//! which of haq's limits ran out and how far ([`LocalDetail::parse`]).

use serde::{Deserialize, Serialize};

use crate::wire::fds::FdLimit;
use crate::wire::io::LocalErrno;

/// How a stream ended, from the client's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `[DONE]` and/or a finish_reason, no error.
    Completed,
    /// An in-band error event ended the stream.
    ExplicitError,
    /// 429 or 503: admission refused.
    Rejected,
    /// Any other HTTP error status.
    HttpError,
    /// TCP connection refused.
    Refused,
    /// No connection within the connect timeout.
    ConnectTimeout,
    /// No first event within the first-token timeout.
    FirstTokenTimeout,
    /// Silence between events longer than the idle timeout.
    IdleTimeout,
    /// Connection reset or aborted mid-stream.
    Reset,
    /// Body ended with no terminator (`[DONE]`, finish_reason or error).
    Truncated,
    /// An event that could not be read.
    Malformed,
    /// haq stopped the request at the drain timeout (it ran past the end of the load
    /// and the drain): not served.
    Cancelled,
    /// The client left on purpose (the workload's `abandon`): closed its connection
    /// mid-stream. The client's own leaving, never the target's failure; Request-Fate
    /// asks whether the gateway cancelled the upstream (M4).
    Abandoned,
    /// haq's own host ran out of something (file descriptors, memory or socket
    /// buffers, local ports) for this request: never the target's failure; the run is
    /// INVALID. `detail` starts with the errno ([`local_detail`]).
    Local,
    /// The response passed one of `client.limits` (an SSE line, one event, a whole
    /// answer, the whole stream): haq stopped reading and closed the connection. The
    /// target's protocol violation; `detail` names the limit, the size read and how
    /// the oversized part began.
    Oversized,
    /// A stream still going `client.limits.duration` after it was sent (events
    /// coming, no end): haq closed it. The target's failure to end an answer.
    Endless,
    /// Data events after `[DONE]`, or bytes still coming `client.limits.after_done`
    /// after it (haq then closed the connection): the target's protocol violation.
    AfterDone,
    /// A `content-encoding` haq did not ask for (it asks for `identity`): the target's
    /// protocol violation; the body is not decoded.
    Encoded,
    /// A response head haq could not accept: larger than 64 KiB, more than 128
    /// headers, not complete `client.limits.head_timeout` after its first byte, or not
    /// HTTP. The target's protocol violation.
    BadHead,
    /// haq was interrupted (SIGINT/SIGTERM) while the request ran and stopped it:
    /// neither a failure nor a success of the target; the judgement leaves it out.
    Interrupted,
}

impl Outcome {
    pub const ALL: [Outcome; 20] = [
        Outcome::Completed,
        Outcome::ExplicitError,
        Outcome::Rejected,
        Outcome::HttpError,
        Outcome::Refused,
        Outcome::ConnectTimeout,
        Outcome::FirstTokenTimeout,
        Outcome::IdleTimeout,
        Outcome::Reset,
        Outcome::Truncated,
        Outcome::Malformed,
        Outcome::Cancelled,
        Outcome::Abandoned,
        Outcome::Local,
        Outcome::Oversized,
        Outcome::Endless,
        Outcome::AfterDone,
        Outcome::Encoded,
        Outcome::BadHead,
        Outcome::Interrupted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::ExplicitError => "explicit_error",
            Outcome::Rejected => "rejected",
            Outcome::HttpError => "http_error",
            Outcome::Refused => "refused",
            Outcome::ConnectTimeout => "connect_timeout",
            Outcome::FirstTokenTimeout => "first_token_timeout",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::Reset => "reset",
            Outcome::Truncated => "truncated",
            Outcome::Malformed => "malformed",
            Outcome::Cancelled => "cancelled",
            Outcome::Abandoned => "abandoned",
            Outcome::Local => "local",
            Outcome::Oversized => "oversized",
            Outcome::Endless => "endless",
            Outcome::AfterDone => "after_done",
            Outcome::Encoded => "encoded",
            Outcome::BadHead => "bad_head",
            Outcome::Interrupted => "interrupted",
        }
    }

    /// Ended by the client's or haq's own doing, neither a success nor a failure of
    /// the target: stopped at the drain timeout (`cancelled`: not served, counted so
    /// by Capacity and Overload apart), left on purpose, stopped by an interrupt, or
    /// failed by haq's own host (`local`: the run is INVALID instead).
    pub fn is_not_the_targets(self) -> bool {
        matches!(
            self,
            Outcome::Cancelled | Outcome::Abandoned | Outcome::Interrupted | Outcome::Local
        )
    }

    /// A response that broke the wire protocol (haq ended or refused it): the target's
    /// failure, and a Request-Fate finding.
    pub fn is_protocol_violation(self) -> bool {
        matches!(
            self,
            Outcome::Oversized
                | Outcome::Endless
                | Outcome::AfterDone
                | Outcome::Encoded
                | Outcome::BadHead
        )
    }
}

/// The `detail` of a `local` end: the errno, what ran out, haq's open-file limit, then
/// the error as the system gave it.
pub fn local_detail(errno: LocalErrno, limit: Option<FdLimit>, text: &str) -> String {
    let what = match errno {
        LocalErrno::Emfile => "haq's open-file limit",
        LocalErrno::Enfile => "the system's open-file table",
        LocalErrno::Enobufs => "socket buffer space",
        LocalErrno::Enomem => "memory",
        LocalErrno::Eaddrnotavail => "local ports",
    };
    let nofile = limit.map_or_else(String::new, |l| format!(" nofile={}/{}", l.soft, l.hard));
    format!("{} ({what} ran out){nofile}: {text}", errno.name())
}

/// What a `local` end's `detail` says ([`local_detail`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalDetail {
    pub errno: LocalErrno,
    pub limit: Option<FdLimit>,
}

impl LocalDetail {
    pub fn parse(detail: &str) -> Option<LocalDetail> {
        let errno = LocalErrno::from_name(detail.split_whitespace().next()?)?;
        let limit = detail
            .split_whitespace()
            .find_map(|w| w.strip_prefix("nofile="))
            .and_then(|v| {
                let (soft, hard) = v.trim_end_matches(':').split_once('/')?;
                Some(FdLimit {
                    soft: soft.parse().ok()?,
                    hard: hard.parse().ok()?,
                })
            });
        Some(LocalDetail { errno, limit })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_is_named_as_serde_names_it() {
        for o in Outcome::ALL {
            let json = serde_json::to_string(&o).expect("json");
            assert_eq!(json, format!("\"{}\"", o.as_str()));
            let back: Outcome = serde_json::from_str(&json).expect("back");
            assert_eq!(back, o);
        }
    }

    #[test]
    fn a_local_detail_reads_back_its_errno_and_limit() {
        let l = FdLimit {
            soft: 1024,
            hard: 4096,
        };
        let d = local_detail(
            LocalErrno::Emfile,
            Some(l),
            "connect failed: Too many open files (os error 24)",
        );
        assert!(
            d.starts_with(
                "EMFILE (haq's open-file limit ran out) nofile=1024/4096: connect failed"
            ),
            "{d}"
        );
        assert_eq!(
            LocalDetail::parse(&d),
            Some(LocalDetail {
                errno: LocalErrno::Emfile,
                limit: Some(l)
            })
        );
        let d = local_detail(LocalErrno::Eaddrnotavail, None, "x");
        assert_eq!(
            LocalDetail::parse(&d),
            Some(LocalDetail {
                errno: LocalErrno::Eaddrnotavail,
                limit: None
            })
        );
        assert_eq!(LocalDetail::parse("connection refused"), None);
    }
}
