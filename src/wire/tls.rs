//! The process's TLS crypto provider (STYLE.md: one provider, ring).

/// Installs rustls' ring provider once per process (reqwest is built without one).
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
