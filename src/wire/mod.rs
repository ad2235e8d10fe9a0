//! The bottom of the stack: what crosses a process boundary, shared by haq's client,
//! its proxy, the trace and the embedded cluster — SSE parsing and the classification
//! of each event, header names, the I/O error kinds the stream-end classification
//! reads, the monotonic clock every process stamps with, the journal lines the sim's
//! processes write and the checks read, the units every file and command line uses,
//! and haq's open-file limit. It imports nothing of haq's.

pub mod chunk;
mod clock;
pub mod fds;
pub mod hash;
pub mod headers;
pub mod heap;
pub mod io;
pub mod journal;
pub mod kinds;
pub mod marker;
pub mod redact;
pub mod scan;
pub mod sse;
pub mod tls;
pub mod units;

pub use clock::mono_ns;

use std::io::Write;
use std::net::SocketAddr;

/// First line a sim process prints on stdout once it listens (`HAQ_LISTEN <addr>`):
/// how the launcher learns a process's address.
pub const LISTEN_PREFIX: &str = "HAQ_LISTEN ";

/// Prints the `HAQ_LISTEN <addr>` line a launcher waits for (a sim process, the
/// benchmark's server).
pub fn announce(addr: SocketAddr) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{LISTEN_PREFIX}{addr}");
    let _ = out.flush();
}
