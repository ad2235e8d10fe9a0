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

/// The `host:port` a header value names an upstream by: `http://10.0.0.11:8000/v1`,
/// `10.0.0.11:8000` and `HTTP://10.0.0.11:8000/` all give `10.0.0.11:8000`.
pub fn authority(v: &str) -> &str {
    let v = v.trim();
    let rest = match v.find("://") {
        Some(i) => &v[i + 3..],
        None => v,
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let hp = &rest[..end];
    // `user@host:port`: the host is after the last `@`.
    hp.rsplit('@').next().unwrap_or(hp)
}

#[cfg(test)]
mod tests {
    #[test]
    fn authorities_of_urls_and_addresses() {
        for v in [
            "http://127.0.0.1:9101",
            "http://127.0.0.1:9101/v1/chat/completions",
            " 127.0.0.1:9101 ",
            "HTTPS://u:p@127.0.0.1:9101?x",
        ] {
            assert_eq!(super::authority(v), "127.0.0.1:9101", "{v}");
        }
        assert_eq!(super::authority("w2"), "w2");
    }
}
