//! A sim process's journal: JSON lines stamped with CLOCK_MONOTONIC (`t_ns`), so
//! `haq check` can place them on the run's timeline. Lines go through a writer thread
//! (flushed at least every 50 ms); [`Journal::flush`] waits until everything written
//! so far is on disk, which a worker does before it SIGKILLs itself at a fault hook.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use crate::wire::mono_ns;

enum Msg {
    Line(String),
    Flush(mpsc::SyncSender<()>),
}

#[derive(Clone)]
pub struct Journal {
    tx: Option<mpsc::Sender<Msg>>,
}

impl Journal {
    /// A journal that records nothing.
    pub fn none() -> Journal {
        Journal { tx: None }
    }

    /// Opens (appends to) `path`; `None` gives a journal that records nothing.
    pub fn open(path: Option<&Path>) -> std::io::Result<Journal> {
        let Some(path) = path else {
            return Ok(Journal::none());
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (tx, rx) = mpsc::channel::<Msg>();
        std::thread::Builder::new()
            .name("haq-journal".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(file);
                // A steady trickle of lines never lets `recv_timeout` time out: flush
                // by age too, so readers never wait more than ~50 ms for a line.
                let mut flushed = std::time::Instant::now();
                loop {
                    match rx.recv_timeout(Duration::from_millis(50)) {
                        Ok(Msg::Line(l)) => {
                            let _ = out.write_all(l.as_bytes());
                            let _ = out.write_all(b"\n");
                            if flushed.elapsed() >= Duration::from_millis(50) {
                                let _ = out.flush();
                                flushed = std::time::Instant::now();
                            }
                        }
                        Ok(Msg::Flush(ack)) => {
                            let _ = out.flush();
                            let _ = out.get_ref().sync_data();
                            let _ = ack.send(());
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let _ = out.flush();
                            flushed = std::time::Instant::now();
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    }
                }
                let _ = out.flush();
            })?;
        Ok(Journal { tx: Some(tx) })
    }

    /// Appends one entry with its `t_ns` stamp.
    pub fn write<T: serde::Serialize>(&self, entry: T) {
        if let Some(tx) = &self.tx {
            let stamped = crate::wire::journal::Stamped {
                t_ns: mono_ns(),
                entry,
            };
            if let Ok(line) = serde_json::to_string(&stamped) {
                let _ = tx.send(Msg::Line(line));
            }
        }
    }

    /// Blocks until every line written before this call is on disk (at most 2 s).
    pub fn flush(&self) {
        if let Some(tx) = &self.tx {
            let (ack_tx, ack_rx) = mpsc::sync_channel(1);
            if tx.send(Msg::Flush(ack_tx)).is_ok() {
                let _ = ack_rx.recv_timeout(Duration::from_secs(2));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::journal::{GatewayEntry, Stamped, read_lines};

    #[test]
    fn flush_puts_lines_on_disk() {
        let dir = std::env::temp_dir().join(format!("haq-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("j.jsonl");
        let _ = std::fs::remove_file(&p);
        let j = Journal::open(Some(&p)).expect("open");
        j.write(GatewayEntry::NoUpstream {
            req: "r1".into(),
            attempts: 2,
        });
        j.flush();
        let lines: Vec<Stamped<GatewayEntry>> = read_lines(&p).expect("io").expect("parse");
        assert_eq!(lines.len(), 1);
        assert!(lines[0].t_ns > 0);
    }

    /// A line every 20 ms never lets the writer's receive time out; lines still reach
    /// the file by age (here well before 8 KiB of them would fill the buffer).
    #[test]
    fn a_steady_trickle_is_flushed_by_age() {
        let dir = std::env::temp_dir().join(format!("haq-journal-age-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("j.jsonl");
        let _ = std::fs::remove_file(&p);
        let j = Journal::open(Some(&p)).expect("open");
        let start = std::time::Instant::now();
        let mut on_disk = false;
        while !on_disk && start.elapsed() < Duration::from_secs(2) {
            j.write(GatewayEntry::NoUpstream {
                req: "r".into(),
                attempts: 1,
            });
            std::thread::sleep(Duration::from_millis(20));
            on_disk = std::fs::metadata(&p).is_ok_and(|m| m.len() > 0);
        }
        assert!(on_disk, "nothing on disk after 2 s of steady writes");
    }
}
