//! Secrets never reach a file: every value haq learns is a credential (a header read
//! from the environment or a file, the value of a credential header) is registered
//! here, and the trace writer replaces it wherever it appears in a line it writes (a
//! server that echoes a key in a header or an error body). The set only grows while
//! the process lives (several runs in one process share it; redacting one run's key in
//! another's trace is harmless).

use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// What a secret is replaced by.
pub const REDACTED: &str = "[redacted]";
/// Shorter values are not treated as secrets (they would redact ordinary text).
pub const MIN_SECRET_LEN: usize = 8;

/// Headers whose values are credentials, whatever they hold.
pub const CREDENTIAL_HEADERS: [&str; 6] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
];

/// Each secret as it appears in text and as JSON escapes it (without quotes).
static SECRETS: RwLock<Vec<(String, String)>> = RwLock::new(Vec::new());
static ANY: AtomicBool = AtomicBool::new(false);

/// Registers secret values (too short ones are ignored).
pub fn add(values: impl IntoIterator<Item = String>) {
    let mut g = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    for v in values {
        if v.len() < MIN_SECRET_LEN || g.iter().any(|(s, _)| *s == v) {
            continue;
        }
        let json = serde_json::to_string(&v).unwrap_or_default();
        let escaped = json
            .strip_prefix('"')
            .and_then(|j| j.strip_suffix('"'))
            .unwrap_or(&v)
            .to_string();
        g.push((v, escaped));
        ANY.store(true, Ordering::Release);
    }
}

/// Whether any secret is registered (the writer's fast path asks first).
#[inline]
pub fn any() -> bool {
    ANY.load(Ordering::Acquire)
}

/// Replaces every registered secret in a written line (plain or JSON-escaped).
pub fn redact_bytes(line: &mut Vec<u8>) {
    if !any() {
        return;
    }
    let g = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    for (plain, escaped) in g.iter() {
        for s in [plain, escaped] {
            if memchr::memmem::find(line, s.as_bytes()).is_some() {
                let text = String::from_utf8_lossy(line).replace(s.as_str(), REDACTED);
                *line = text.into_bytes();
            }
        }
    }
}

/// `s` with every registered secret replaced.
pub fn redact(s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    redact_bytes(&mut b);
    String::from_utf8(b).unwrap_or_default()
}

/// A credential header (by name, any case).
pub fn is_credential(name: &str) -> bool {
    CREDENTIAL_HEADERS
        .iter()
        .any(|h| h.eq_ignore_ascii_case(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_secrets_are_replaced_plain_and_escaped() {
        add(["sk-test-\"quoted\"-0123".to_string(), "short".to_string()]);
        let mut line = br#"{"a":"Bearer sk-test-\"quoted\"-0123","b":"short"}"#.to_vec();
        redact_bytes(&mut line);
        assert_eq!(
            String::from_utf8(line).expect("utf8"),
            r#"{"a":"Bearer [redacted]","b":"short"}"#
        );
        assert_eq!(redact("x sk-test-\"quoted\"-0123 y"), "x [redacted] y");
        assert!(is_credential("Authorization") && !is_credential("x-request-id"));
    }
}
