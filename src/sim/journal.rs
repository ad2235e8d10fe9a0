//! A sim process's journal: JSON lines stamped with CLOCK_MONOTONIC (`t_ns`), so
//! `haq check` can place them on the run's timeline.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc;

use crate::trace::mono_ns;

#[derive(Clone)]
pub struct Journal {
    tx: Option<mpsc::Sender<serde_json::Value>>,
}

impl Journal {
    /// Opens (appends to) `path`; `None` gives a journal that records nothing.
    pub fn open(path: Option<&Path>) -> std::io::Result<Journal> {
        let Some(path) = path else {
            return Ok(Journal { tx: None });
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (tx, rx) = mpsc::channel::<serde_json::Value>();
        std::thread::Builder::new()
            .name("haq-journal".into())
            .spawn(move || {
                let mut out = std::io::BufWriter::new(file);
                loop {
                    match rx.recv_timeout(std::time::Duration::from_millis(50)) {
                        Ok(v) => {
                            let _ = serde_json::to_writer(&mut out, &v);
                            let _ = out.write_all(b"\n");
                        }
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            let _ = out.flush();
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
            let stamped = crate::trace::journal::Stamped {
                t_ns: mono_ns(),
                entry,
            };
            if let Ok(v) = serde_json::to_value(&stamped) {
                let _ = tx.send(v);
            }
        }
    }
}
