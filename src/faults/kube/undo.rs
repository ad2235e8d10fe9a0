//! A kubernetes heal run by the heal guard: synchronous, so the API calls run on
//! the client's runtime from a thread of their own, bounded; a verified heal closes
//! the fault's ledger entry.

use std::sync::Arc;
use std::time::Duration;

use super::super::guard::Healed;
use super::super::ledger::Ledger;
use crate::target::kube::cluster::Cluster;

/// Longest a heal of the run may wait for the API.
pub const HEAL_LIMIT: Duration = Duration::from_secs(30);

/// Runs `heal` (its outcome: how, or why not), recording a verified heal in `ledger`;
/// `late` says what did not finish within [`HEAL_LIMIT`].
pub fn heal_with(
    cluster: &Cluster,
    ledger: &(Arc<Ledger>, u64),
    late: String,
    heal: impl std::future::Future<Output = Result<String, String>> + Send + 'static,
) -> Healed {
    heal_within(cluster, ledger, HEAL_LIMIT, late, heal)
}

/// [`heal_with`], waiting at most `limit` (an exec's own timeout).
pub fn heal_within(
    cluster: &Cluster,
    ledger: &(Arc<Ledger>, u64),
    limit: Duration,
    late: String,
    heal: impl std::future::Future<Output = Result<String, String>> + Send + 'static,
) -> Healed {
    let h = healed_within(cluster, limit, late, heal);
    if h.verified {
        ledger.0.healed(ledger.1, &h.detail);
    }
    h
}

/// Runs `heal` (its outcome: how, or why not); `late` says what did not finish
/// within `limit`.
fn healed_within(
    cluster: &Cluster,
    limit: Duration,
    late: String,
    heal: impl std::future::Future<Output = Result<String, String>> + Send + 'static,
) -> Healed {
    match cluster.block_on(limit, heal) {
        Some(Ok(detail)) => Healed {
            verified: true,
            detail,
        },
        Some(Err(detail)) => Healed {
            verified: false,
            detail,
        },
        None => Healed {
            verified: false,
            detail: format!("{late} within {limit:?}"),
        },
    }
}
