//! I/O errors as the stream-end classification reads them: the kind under an error's
//! source chain, and the chain on one line.

/// Walks an error's source chain to the I/O error kind underneath.
pub fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// An error and its sources on one line.
pub fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        cur = s.source();
    }
    parts.join(": ")
}

/// An error of haq's own host, not of the peer: haq (or its machine) ran out of file
/// descriptors, memory or socket buffers, or local ports. A request that fails on one
/// of these says nothing about the target (issue 15 item 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LocalErrno {
    /// haq's own open-file limit (`RLIMIT_NOFILE`).
    Emfile,
    /// The system-wide open-file table.
    Enfile,
    /// No socket buffer space.
    Enobufs,
    /// Out of memory.
    Enomem,
    /// No free local port (or address) to connect from.
    Eaddrnotavail,
}

impl LocalErrno {
    pub const ALL: [LocalErrno; 5] = [
        LocalErrno::Emfile,
        LocalErrno::Enfile,
        LocalErrno::Enobufs,
        LocalErrno::Enomem,
        LocalErrno::Eaddrnotavail,
    ];

    pub fn from_raw(errno: i32) -> Option<LocalErrno> {
        Some(match errno {
            libc::EMFILE => LocalErrno::Emfile,
            libc::ENFILE => LocalErrno::Enfile,
            libc::ENOBUFS => LocalErrno::Enobufs,
            libc::ENOMEM => LocalErrno::Enomem,
            libc::EADDRNOTAVAIL => LocalErrno::Eaddrnotavail,
            _ => return None,
        })
    }

    pub fn raw(self) -> i32 {
        match self {
            LocalErrno::Emfile => libc::EMFILE,
            LocalErrno::Enfile => libc::ENFILE,
            LocalErrno::Enobufs => libc::ENOBUFS,
            LocalErrno::Enomem => libc::ENOMEM,
            LocalErrno::Eaddrnotavail => libc::EADDRNOTAVAIL,
        }
    }

    /// The errno's C name (`EMFILE`).
    pub fn name(self) -> &'static str {
        match self {
            LocalErrno::Emfile => "EMFILE",
            LocalErrno::Enfile => "ENFILE",
            LocalErrno::Enobufs => "ENOBUFS",
            LocalErrno::Enomem => "ENOMEM",
            LocalErrno::Eaddrnotavail => "EADDRNOTAVAIL",
        }
    }

    pub fn from_name(name: &str) -> Option<LocalErrno> {
        LocalErrno::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// The local-resource errno under an error's source chain, if there is one.
pub fn local_errno(e: &(dyn std::error::Error + 'static)) -> Option<LocalErrno> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(l) = io.raw_os_error().and_then(LocalErrno::from_raw)
        {
            return Some(l);
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Wrap(std::io::Error);
    impl std::fmt::Display for Wrap {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connect failed")
        }
    }
    impl std::error::Error for Wrap {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn local_errnos_are_found_under_the_source_chain_and_peer_errors_are_not() {
        for l in LocalErrno::ALL {
            let e = Wrap(std::io::Error::from_raw_os_error(l.raw()));
            assert_eq!(local_errno(&e), Some(l));
            assert_eq!(LocalErrno::from_name(l.name()), Some(l));
        }
        for peer in [
            libc::ECONNREFUSED,
            libc::ECONNRESET,
            libc::ETIMEDOUT,
            libc::EHOSTUNREACH,
        ] {
            let e = Wrap(std::io::Error::from_raw_os_error(peer));
            assert_eq!(local_errno(&e), None, "{peer}");
        }
        let plain = std::io::Error::other("too many open files");
        assert_eq!(
            local_errno(&plain),
            None,
            "only the errno counts, not words"
        );
    }
}
