use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::Event;

/// Cheap, cloneable handle that appends events to the trace file from any task.
///
/// Events go over a channel to one writer thread, which drains it every 5 ms,
/// serializes each event as one JSON line and flushes at least every 100 ms, so a
/// killed run keeps everything up to its last flush. Memory stays bounded by what the
/// writer has not yet written (a few ms of events).
#[derive(Clone)]
pub struct TraceWriter {
    tx: mpsc::Sender<Option<Event>>,
}

/// Owns the writer thread; `finish` waits for the last line to reach the disk.
pub struct TraceHandle {
    tx: mpsc::Sender<Option<Event>>,
    join: Option<JoinHandle<std::io::Result<u64>>>,
}

impl TraceWriter {
    pub fn create(path: &Path) -> std::io::Result<(TraceWriter, TraceHandle)> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (tx, rx) = mpsc::channel::<Option<Event>>();
        let join = std::thread::Builder::new()
            .name("haq-trace".into())
            .spawn(move || write_loop(file, rx))?;
        Ok((
            TraceWriter { tx: tx.clone() },
            TraceHandle {
                tx,
                join: Some(join),
            },
        ))
    }

    /// Appends one event. Never blocks; after the writer stopped, events are dropped.
    #[inline]
    pub fn emit(&self, ev: Event) {
        let _ = self.tx.send(Some(ev));
    }

    /// A writer that discards everything (for tools that need no trace).
    pub fn sink() -> TraceWriter {
        let (tx, _rx) = mpsc::channel();
        TraceWriter { tx }
    }
}

impl TraceHandle {
    /// Closes the trace: every event emitted before this call reaches the disk, later
    /// ones are dropped. Returns the number of lines written.
    pub fn finish(mut self) -> std::io::Result<u64> {
        let _ = self.tx.send(None);
        match self.join.take().map(|j| j.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("trace writer thread panicked")),
            None => Ok(0),
        }
    }
}

impl Drop for TraceHandle {
    /// A run that unwinds still gets its trace flushed.
    fn drop(&mut self) {
        if let Some(j) = self.join.take() {
            let _ = self.tx.send(None);
            let _ = j.join();
        }
    }
}

/// How often the writer drains the queue. It never blocks on the channel: a thread
/// wake-up per event costs more than writing the event (futex + context switch), so it
/// polls; events wait at most one tick in memory.
const TICK: Duration = Duration::from_millis(5);
/// Longest time a written line stays in the buffer before it reaches the file.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

fn write_loop(file: std::fs::File, rx: mpsc::Receiver<Option<Event>>) -> std::io::Result<u64> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
    let mut lines = 0u64;
    let mut dirty = false;
    let mut flushed = std::time::Instant::now();
    'run: loop {
        loop {
            match rx.try_recv() {
                Ok(Some(ev)) => {
                    serde_json::to_writer(&mut out, &ev)?;
                    out.write_all(b"\n")?;
                    lines += 1;
                    dirty = true;
                }
                Err(mpsc::TryRecvError::Empty) => break,
                Ok(None) | Err(mpsc::TryRecvError::Disconnected) => break 'run,
            }
        }
        if dirty && flushed.elapsed() >= FLUSH_EVERY {
            out.flush()?;
            dirty = false;
            flushed = std::time::Instant::now();
        }
        std::thread::sleep(TICK);
    }
    out.flush()?;
    out.get_ref().sync_data()?;
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{Edge, read};

    #[test]
    fn writes_and_reads_back_with_torn_tail() {
        let dir = std::env::temp_dir().join(format!("haq-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("t.jsonl");
        let _ = std::fs::remove_file(&p);
        let (w, h) = TraceWriter::create(&p).expect("create");
        for i in 0..100 {
            w.emit(Event::Phase {
                t: i,
                name: format!("p{i}"),
                edge: Edge::Start,
            });
        }
        assert_eq!(h.finish().expect("finish"), 100);
        // a torn last line, as after a crash
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .expect("open");
        f.write_all(b"{\"ev\":\"phase\",\"t\":1").expect("write");
        let evs: Vec<_> = read(&p)
            .expect("read")
            .collect::<Result<_, _>>()
            .expect("parse");
        assert_eq!(evs.len(), 100);
        assert_eq!(evs[99].t(), 99);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
