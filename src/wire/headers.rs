//! Header names haq sends and reads: its own attribution and priority headers, and the
//! queue-time headers servers report.

/// Header naming the replica that served a request (the sim gateway sets it).
pub const WORKER_HEADER: &str = "x-haq-worker";
/// Header naming the attempt that produced the response.
pub const ATTEMPT_HEADER: &str = "x-haq-attempt";
/// Header carrying a request's priority class (`protected` or `best_effort`), so a
/// gateway can shed best-effort traffic first (Q1, Q10).
pub const PRIORITY_HEADER: &str = "x-haq-priority";
/// Headers a server may use to report how long the request queued (milliseconds).
pub const QUEUE_HEADERS: [&str; 2] = ["x-haq-queue-ms", "x-queue-time"];
