//! The per-user list of runs whose heal ledger holds faults still applied
//! (`$HAQ_STATE_DIR/open/`, by default `$XDG_STATE_HOME/haq/open/` or
//! `~/.local/state/haq/open/`): one small file per run with its run directory and its
//! target's identity (the gateway URL without credentials, query or fragment; the
//! kubernetes context and namespace; a sim run, whose cluster is its own, is not
//! listed). A run is listed when it first records a fault in its ledger, and unlisted
//! once its ledger is fully healed; the next `haq run` against the same target heals
//! the runs listed for it wherever their run directories are. No secret goes here: no header, no command, no environment.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One listed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub run_dir: PathBuf,
    pub target: String,
}

/// Where the list is kept: `$HAQ_STATE_DIR/open`, `$XDG_STATE_HOME/haq/open` or
/// `$HOME/.local/state/haq/open` (`None`: no home to keep it in).
pub fn dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let state = var("HAQ_STATE_DIR")
        .or_else(|| var("XDG_STATE_HOME").map(|x| x.join("haq")))
        .or_else(|| var("HOME").map(|h| h.join(".local/state/haq")))?;
    Some(state.join("open"))
}

/// The file that lists `run_dir` (absolute), named by a stable hash of its path.
fn file_for(list: &Path, run_dir: &Path) -> PathBuf {
    // FNV-1a: the same name from every haq version.
    let h = run_dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    list.join(format!("{h:016x}.json"))
}

fn absolute(run_dir: &Path) -> PathBuf {
    std::fs::canonicalize(run_dir)
        .or_else(|_| std::path::absolute(run_dir))
        .unwrap_or_else(|_| run_dir.to_path_buf())
}

/// Lists run `run_dir` against `target`; an error says why it could not be.
pub fn note(run_dir: &Path, target: &str) -> std::io::Result<()> {
    match dir() {
        Some(list) => note_in(&list, run_dir, target),
        None => Err(std::io::Error::other(
            "no HOME, XDG_STATE_HOME or HAQ_STATE_DIR",
        )),
    }
}

fn note_in(list: &Path, run_dir: &Path, target: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(list)?;
    let run_dir = absolute(run_dir);
    let e = Entry {
        run_dir: run_dir.clone(),
        target: target.into(),
    };
    let file = file_for(list, &run_dir);
    // Written whole, then renamed: a reader never sees half an entry.
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, serde_json::to_vec(&e).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, &file)
}

/// Unlists run `run_dir` (nothing left open in its ledger).
pub fn forget(run_dir: &Path) {
    if let Some(list) = dir() {
        forget_in(&list, run_dir);
    }
}

fn forget_in(list: &Path, run_dir: &Path) {
    let _ = std::fs::remove_file(file_for(list, &absolute(run_dir)));
}

/// The run directories listed against `target`; entries whose run directory has no
/// ledger any more are unlisted.
pub fn of_target(target: &str) -> Vec<PathBuf> {
    dir().map(|l| of_target_in(&l, target)).unwrap_or_default()
}

fn of_target_in(list: &Path, target: &str) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(list).into_iter().flatten().flatten();
    let mut out = Vec::new();
    for f in entries.map(|e| e.path()) {
        if f.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Some(e) = std::fs::read(&f)
            .ok()
            .and_then(|b| serde_json::from_slice::<Entry>(&b).ok())
        else {
            continue;
        };
        if !e.run_dir.join(crate::trace::files::HEALS_FILE).exists() {
            let _ = std::fs::remove_file(&f);
        } else if e.target == target {
            out.push(e.run_dir);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Noted, found by its target only, forgotten; the file holds the run directory
    /// and the target and nothing else.
    #[test]
    fn a_run_is_listed_by_target_until_forgotten() {
        let base = std::env::temp_dir().join(format!("haq-open-runs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let run = base.join("run");
        std::fs::create_dir_all(&run).expect("dir");
        std::fs::write(run.join(crate::trace::files::HEALS_FILE), "").expect("ledger");
        let list = base.join("state/open");
        note_in(&list, &run, "url http://127.0.0.1:1/v1").expect("noted");
        assert_eq!(
            of_target_in(&list, "url http://127.0.0.1:1/v1"),
            vec![absolute(&run)]
        );
        assert!(of_target_in(&list, "url http://127.0.0.1:2/v1").is_empty());
        let files: Vec<_> = std::fs::read_dir(&list).expect("list").flatten().collect();
        assert_eq!(files.len(), 1);
        let e: Entry =
            serde_json::from_slice(&std::fs::read(files[0].path()).expect("read")).expect("json");
        assert_eq!(e.run_dir, absolute(&run));
        forget_in(&list, &run);
        assert!(of_target_in(&list, "url http://127.0.0.1:1/v1").is_empty());
        // A run directory removed since: unlisted when the list is read.
        note_in(&list, &run, "sim").expect("noted");
        std::fs::remove_dir_all(&run).expect("rm");
        assert!(of_target_in(&list, "sim").is_empty());
        assert_eq!(std::fs::read_dir(&list).expect("list").count(), 0);
        let _ = std::fs::remove_dir_all(&base);
    }
}
