//! Listen addresses that outlive a run (`haq proxy`, issue 21 item 8): the daemon
//! holds each listening socket, and a `haq run` borrows it for the run — the same
//! kernel socket, passed over a Unix socket (SCM_RIGHTS) — so a router started
//! against haq's listen addresses never sees them go away between runs (vllm-router
//! and sglang-router do not even start until their upstreams answer).
//!
//! One control socket per listen address, `<dir>/<ip>_<port>.sock` (`dir`:
//! `$HAQ_PROXY_DIR`, default `/tmp/haq-proxy`). The protocol is one line and one
//! answer: the run sends `attach\n`; the daemon answers `k` with the listener's file
//! descriptor attached, or `busy\n` when another run holds it. The run keeps the
//! connection open for as long as it uses the listener; its end (the run's end, or
//! its death) gives the listener back. Hand-written: three messages over a Unix
//! socket need no framework, and std has no stable SCM_RIGHTS API (nix does it).
//!
//! While a run holds the listener the daemon accepts nothing on it, and it closed its
//! own connections when it gave it away (a router's pooled connection to the daemon
//! would otherwise bypass the run's proxy). A listener shut down by the run (its
//! replica found dead: refused as without haq) is listening again once the daemon
//! sees its replica alive.

use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The directory of the control sockets.
pub fn dir() -> PathBuf {
    std::env::var_os("HAQ_PROXY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/haq-proxy"))
}

/// The control socket of `listen` in `dir`.
pub fn control_path(dir: &Path, listen: SocketAddr) -> PathBuf {
    let ip = listen.ip().to_string().replace([':', '.'], "_");
    dir.join(format!("{ip}_{}.sock", listen.port()))
}

/// A listener borrowed from `haq proxy`, and the lease that gives it back when
/// dropped.
pub struct Borrowed {
    pub listener: std::net::TcpListener,
    pub lease: Lease,
}

/// Holds a borrowed listener: dropping it tells the daemon the run is done with it.
pub struct Lease {
    _held: UnixStream,
}

/// The listener of `listen` from a running `haq proxy` whose control sockets are in
/// `dir`, if one holds it. `Ok(None)`: no daemon (no control socket, or a stale one
/// nobody answers).
pub fn borrow(dir: &Path, listen: SocketAddr) -> anyhow::Result<Option<Borrowed>> {
    let path = control_path(dir, listen);
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(_) => return Ok(None),
    };
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"attach\n")
        .with_context(|| format!("asking haq proxy for {listen} ({})", path.display()))?;
    let mut buf = [0u8; 8];
    let mut space = nix::cmsg_space!(RawFd);
    let (n, fd) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg = recvmsg::<()>(s.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty())
            .with_context(|| format!("haq proxy for {listen} did not answer"))?;
        let fd = msg
            .cmsgs()
            .ok()
            .into_iter()
            .flatten()
            .find_map(|c| match c {
                ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
                _ => None,
            });
        (msg.bytes, fd)
    };
    match (buf.get(..n), fd) {
        (Some(b"k"), Some(fd)) => {
            // SAFETY: the fd was just received with SCM_RIGHTS: this process owns it.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let listener = std::net::TcpListener::from(owned);
            listener.set_nonblocking(true)?;
            s.set_read_timeout(None)?;
            Ok(Some(Borrowed {
                listener,
                lease: Lease { _held: s },
            }))
        }
        (Some(b"busy\n"), _) => anyhow::bail!(
            "{listen} is held by haq proxy and lent to another haq run; wait for it to end"
        ),
        _ => anyhow::bail!("haq proxy for {listen} answered something else"),
    }
}

/// The daemon's side of one listen address: its control socket.
pub struct Lender {
    control: UnixListener,
    path: PathBuf,
}

impl Lender {
    /// Creates the control socket of `listen` (replacing a stale one: nobody answers
    /// on it; a live one is an error — another daemon holds the address).
    pub fn bind(dir: &Path, listen: SocketAddr) -> anyhow::Result<Lender> {
        let path = control_path(dir, listen);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        if UnixStream::connect(&path).is_ok() {
            anyhow::bail!(
                "another haq proxy already holds {listen} ({})",
                path.display()
            );
        }
        let _ = std::fs::remove_file(&path);
        let control = UnixListener::bind(&path)
            .with_context(|| format!("creating the control socket {}", path.display()))?;
        Ok(Lender { control, path })
    }

    /// Serves one run at a time, forever (a blocking thread): `lend` is told a run
    /// took the listener (`true`) and gave it back (`false`).
    pub fn serve(&self, listener: RawFd, lend: impl Fn(bool)) {
        for s in self.control.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut line = [0u8; 7];
            if s.read_exact(&mut line).is_err() || &line != b"attach\n" {
                continue;
            }
            lend(true);
            let fds = [listener];
            let sent = sendmsg::<()>(
                s.as_raw_fd(),
                &[IoSlice::new(b"k")],
                &[ControlMessage::ScmRights(&fds)],
                MsgFlags::empty(),
                None,
            );
            if sent.is_ok() {
                // Held until the run closes its end (or dies); others are told busy.
                let _ = s.set_read_timeout(None);
                let _ = s.set_nonblocking(true);
                wait_closed(&self.control, &s);
            }
            lend(false);
        }
    }
}

/// Waits for the run's end of `lease` to close, answering `busy` to every other run
/// that asks meanwhile.
fn wait_closed(control: &UnixListener, lease: &UnixStream) {
    let _ = control.set_nonblocking(true);
    let mut b = [0u8; 16];
    loop {
        match (&*lease).read(&mut b) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        while let Ok((mut other, _)) = control.accept() {
            let _ = other.set_nonblocking(false);
            let _ = other.write_all(b"busy\n");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = control.set_nonblocking(false);
}

impl Drop for Lender {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// A daemon lends its listener: the run accepts on the very socket the daemon
    /// bound, a second run is told busy meanwhile, and the daemon hears the end.
    #[test]
    fn a_listener_is_lent_and_given_back() {
        let tmp = std::env::temp_dir().join(format!("haq-handover-{}", std::process::id()));
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        assert!(borrow(&tmp, addr).expect("no daemon is no error").is_none());
        let lender = Lender::bind(&tmp, addr).expect("control socket");
        let lent = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (lent2, seen2, fd) = (lent.clone(), seen.clone(), l.as_raw_fd());
        std::thread::spawn(move || {
            lender.serve(fd, |on| {
                lent2.store(on, Ordering::SeqCst);
                if let Ok(mut s) = seen2.lock() {
                    s.push(on);
                }
            })
        });
        let b = borrow(&tmp, addr).expect("attach").expect("lent");
        assert!(lent.load(Ordering::SeqCst));
        assert_eq!(b.listener.local_addr().expect("addr"), addr);
        let err = borrow(&tmp, addr)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("another haq run"), "{err}");
        b.listener.set_nonblocking(false).expect("blocking");
        let c = std::net::TcpStream::connect(addr).expect("connect");
        let (a, peer) = b.listener.accept().expect("the borrowed socket accepts");
        assert_eq!(peer, c.local_addr().expect("local"));
        drop((a, c, b));
        for _ in 0..250 {
            if !lent.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!lent.load(Ordering::SeqCst), "given back");
        assert_eq!(*seen.lock().expect("lock"), vec![true, false]);
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
