//! How the gateway reads a failed HTTP call to a worker: a refused connection (nothing
//! listens: the worker is gone) and the error's text for the journal.

/// True when `e` is a refused connection (nothing listens).
pub fn refused(e: &reqwest::Error) -> bool {
    crate::wire::io::io_kind(e) == Some(std::io::ErrorKind::ConnectionRefused)
}

/// The error and its sources, on one line.
pub fn error_text(e: &(dyn std::error::Error + 'static)) -> String {
    crate::wire::io::chain_text(e)
}
