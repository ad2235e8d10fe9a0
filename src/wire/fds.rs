//! haq's open-file limit (`RLIMIT_NOFILE`): one socket per stream, three when the
//! request passes haq's own proxy, so `haq run` and `haq bench` raise the soft limit
//! to the hard limit before any load ([`raise_fd_limit`]); children inherit the raised
//! limit (a sim gateway holds two sockets per stream too). The limit in force is
//! written with every request that ran out of descriptors (`trace::local_detail`), so
//! judging can say what to raise.

/// The open-file limit: soft, hard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    pub soft: u64,
    pub hard: u64,
}

impl std::fmt::Display for FdLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |v: u64| {
            if v == libc::RLIM_INFINITY {
                "unlimited".to_string()
            } else {
                v.to_string()
            }
        };
        write!(f, "{} (hard limit {})", n(self.soft), n(self.hard))
    }
}

/// The open-file limit now in force.
pub fn fd_limit() -> Option<FdLimit> {
    // SAFETY: getrlimit fills a struct we own.
    let mut r: libc::rlimit = unsafe { std::mem::zeroed() };
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0).then_some(FdLimit {
        soft: r.rlim_cur,
        hard: r.rlim_max,
    })
}

/// Raises the open-file limit to the hard limit; returns the limit in force after.
pub fn raise_fd_limit() -> Option<FdLimit> {
    let now = fd_limit()?;
    if now.soft < now.hard {
        let r = libc::rlimit {
            rlim_cur: now.hard,
            rlim_max: now.hard,
        };
        // SAFETY: setrlimit reads the struct we own; failure leaves the limit as it was.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) };
    }
    fd_limit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fd_limit_is_raised_to_the_hard_limit() {
        let l = raise_fd_limit().expect("getrlimit");
        assert_eq!(l.soft, l.hard, "{l}");
        assert_eq!(fd_limit(), Some(l));
    }
}
