//! Bytes held back at a probe point ([`Hold`]) and how a release of them resolves.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::oneshot;

use crate::proxy::probe::Release;

/// How long a [`Release::Auto`] waits for the replica's side to end.
const AUTO_GRACE: Duration = Duration::from_millis(300);

/// Bytes held back at a probe point.
pub(super) struct Hold {
    pub(super) held: BytesMut,
    /// Set once the point was reached and reported.
    pub(super) release: Option<oneshot::Receiver<Release>>,
    /// After [`Release::Auto`]: deliver at this time unless the replica's side ends.
    pub(super) auto_until: Option<Instant>,
}

impl Hold {
    pub(super) fn new(release: Option<oneshot::Receiver<Release>>) -> Hold {
        Hold {
            held: BytesMut::new(),
            release,
            auto_until: None,
        }
    }
}

/// Resolves a release of `hold`: what to do with the bytes it held, or `None` while
/// an automatic release waits to see whether the replica's side ends.
pub(super) fn settle(
    hold: &mut Option<Hold>,
    r: Release,
    up_ended: bool,
) -> Option<(Release, Hold)> {
    let r = match r {
        Release::Auto if up_ended => Release::Drop,
        Release::Auto => {
            if let Some(h) = hold {
                h.release = None;
                h.auto_until = Some(Instant::now() + AUTO_GRACE);
            }
            return None;
        }
        r => r,
    };
    hold.take().map(|h| (r, h))
}

/// The release of `h` once the watcher sends it; never while nothing is held.
pub(super) async fn released(h: &mut Option<Hold>) -> Release {
    match h.as_mut().and_then(|h| h.release.as_mut()) {
        // A watcher that went away without a word lets the bytes through.
        Some(rx) => rx.await.unwrap_or(Release::Forward),
        None => std::future::pending().await,
    }
}
