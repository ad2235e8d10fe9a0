//! Scenario files: parse (with positions), apply `--set` overrides, inline the workload
//! file, deserialize into the [`Scenario`] model. Any problem becomes one
//! [`ScenarioError`] naming file:line:col, field, value and reason; [`Parsed::error`]
//! places the problems the next stage (`plan`, validation) finds in the same way.

pub mod error;
pub mod located;
pub mod model;
pub mod overrides;

use std::path::{Path, PathBuf};

pub use error::{Issue, ScenarioError};
pub use model::*;

use located::Located;
use overrides::{Seg, path_string};

/// The starter scenario `haq init` writes.
pub const STARTER: &str = include_str!("../starter.yaml");

/// A scenario parsed, with where each part of it came from.
pub struct Parsed {
    pub scenario: Scenario,
    pub place: Place,
}

/// Places the issues found in a parsed scenario.
pub struct Place(Sources);

impl Place {
    /// An issue found in the parsed scenario, placed at its file:line:col (or its
    /// `--set` argument).
    pub fn error(&self, field: &str, value: Option<String>, reason: String) -> ScenarioError {
        self.0.error(field, value, reason, false)
    }
}

/// Where each part of the effective document came from, to place errors.
struct Sources {
    main: (String, Located),
    /// (path prefix, file, tree) for documents mounted into the main one.
    mounts: Vec<(String, String, Located)>,
    /// `--set` specs with their canonical path.
    sets: Vec<(String, String)>,
}

impl Sources {
    fn error(
        &self,
        field: &str,
        value: Option<String>,
        reason: String,
        key: bool,
    ) -> ScenarioError {
        for (path, spec) in self.sets.iter().rev() {
            if field == path
                || field.starts_with(&format!("{path}."))
                || field.starts_with(&format!("{path}["))
            {
                return ScenarioError {
                    source: format!("--set {spec}"),
                    pos: None,
                    field: field.into(),
                    value,
                    reason,
                };
            }
        }
        let (file, tree, sub) = self
            .mounts
            .iter()
            .filter_map(|(prefix, file, tree)| {
                let rest = field.strip_prefix(prefix.as_str())?;
                let rest = rest.strip_prefix('.').unwrap_or(rest);
                Some((file, tree, rest.to_string()))
            })
            .next()
            .unwrap_or((&self.main.0, &self.main.1, field.to_string()));
        let pos = if key {
            tree.key_pos(&sub)
        } else {
            tree.pos(&sub)
        };
        ScenarioError {
            source: file.clone(),
            pos,
            field: field.into(),
            value,
            reason,
        }
    }
}

/// Reads a scenario file, applies the overrides and inlines its workload file.
pub fn parse(path: &Path, sets: &[String], seed: Option<u64>) -> Result<Parsed, ScenarioError> {
    let file = path.display().to_string();
    let text = read_bounded(path).map_err(|e| ScenarioError {
        source: file.clone(),
        pos: None,
        field: String::new(),
        value: None,
        reason: format!("cannot read the scenario file: {e}"),
    })?;
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    parse_str(&text, &file, &base, sets, seed)
}

/// Largest scenario or workload file read (a scenario is a page of YAML).
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// A scenario or workload file's text: a regular file (not a FIFO or a device, which
/// could block or never end) of at most [`MAX_FILE_BYTES`].
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "{} bytes, larger than the {MAX_FILE_BYTES}-byte limit",
            meta.len()
        )));
    }
    let mut text = String::new();
    // A file that grows while read is still read no further than the limit.
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other("larger than the limit"));
    }
    Ok(text)
}

/// As [`parse`], from text already read (`file` names it in errors, `base` resolves
/// relative workload paths).
pub fn parse_str(
    text: &str,
    file: &str,
    base: &Path,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Parsed, ScenarioError> {
    let main = Located::parse(text).map_err(|e| ScenarioError {
        source: file.into(),
        pos: e.pos,
        field: String::new(),
        value: None,
        reason: format!("not valid YAML: {}", e.message),
    })?;
    let mut value = main.value.clone();
    let mut src = Sources {
        main: (file.into(), main),
        mounts: Vec::new(),
        sets: Vec::new(),
    };

    let mut all_sets: Vec<String> = sets.to_vec();
    if let Some(s) = seed {
        all_sets.push(format!("workload.seed={s}"));
    }
    let mut parsed = Vec::new();
    for spec in &all_sets {
        let (segs, v) = overrides::parse_set(spec).map_err(|reason| set_error(spec, reason))?;
        parsed.push((spec, path_string(&segs), segs, v));
    }
    // Overrides inside the mix apply after the workload file is inlined, the others
    // (including `workload.mix=other.yaml`) before.
    let inside_mix = |p: &str| p.starts_with("workload.mix.") || p.starts_with("workload.mix[");
    let (late, early): (Vec<_>, Vec<_>) = parsed.into_iter().partition(|x| inside_mix(&x.1));
    for (spec, path, segs, v) in early {
        overrides::apply(&mut value, &segs, v).map_err(|r| set_error(spec, r))?;
        src.sets.push((path, spec.clone()));
    }
    inline_mix(&mut value, base, &mut src)?;
    for (spec, path, segs, v) in late {
        overrides::apply(&mut value, &segs, v).map_err(|r| set_error(spec, r))?;
        src.sets.push((path, spec.clone()));
    }
    resolve_files(&mut value, base);

    let scenario: Scenario = serde_path_to_error::deserialize(&value).map_err(|e| {
        let mut field = e.path().to_string();
        if field == "." {
            field.clear();
        }
        let msg = e.inner().to_string();
        let unknown = msg.starts_with("unknown field");
        src.error(&field, None, tidy_serde_message(&msg), unknown)
    })?;

    Ok(Parsed {
        scenario,
        place: Place(src),
    })
}

/// Makes the input-file paths of a mix (`classes[*]…empirical.file`) absolute.
fn resolve_mix_files(mix: &mut serde_json::Value, base: &Path) {
    let Some(classes) = mix.get_mut("classes").and_then(|c| c.as_array_mut()) else {
        return;
    };
    for c in classes {
        for ptr in [
            "/prompt_tokens/empirical/file",
            "/output_tokens/empirical/file",
            "/shared_prefix/tokens/empirical/file",
            "/session/turns/empirical/file",
        ] {
            if let Some(v) = c.pointer_mut(ptr) {
                absolute(v, base);
            }
        }
    }
}

/// Absolute, so that a path resolved against a mix file's directory is never joined to
/// the scenario's directory again (`haq run scenarios/x.yaml` with a mix in
/// `../workloads/` that names `lengths.csv`), and the recorded scenario reads back
/// from any working directory.
fn absolute(v: &mut serde_json::Value, base: &Path) {
    if let Some(s) = v.as_str()
        && !Path::new(s).is_absolute()
    {
        let p = base.join(s);
        *v = std::path::absolute(&p)
            .unwrap_or(p)
            .display()
            .to_string()
            .into();
    }
}

/// Input-file paths written in the scenario itself are relative to its directory.
fn resolve_files(value: &mut serde_json::Value, base: &Path) {
    if let Some(m) = value.pointer_mut("/workload/mix") {
        resolve_mix_files(m, base);
    }
    if let Some(v) = value.pointer_mut("/workload/arrival/trace/file") {
        absolute(v, base);
    }
}

fn set_error(spec: &str, reason: String) -> ScenarioError {
    ScenarioError {
        source: format!("--set {spec}"),
        pos: None,
        field: String::new(),
        value: None,
        reason,
    }
}

/// Replaces `workload.mix: path/to/file.yaml` by the file's content.
fn inline_mix(
    value: &mut serde_json::Value,
    base: &Path,
    src: &mut Sources,
) -> Result<(), ScenarioError> {
    let Some(rel) = value
        .pointer("/workload/mix")
        .and_then(|v| v.as_str())
        .map(str::to_string)
    else {
        return Ok(());
    };
    let p: PathBuf = if Path::new(&rel).is_absolute() {
        PathBuf::from(&rel)
    } else {
        base.join(&rel)
    };
    let text = read_bounded(&p).map_err(|e| {
        src.error(
            "workload.mix",
            Some(rel.clone()),
            format!("cannot read workload file {}: {e}", p.display()),
            false,
        )
    })?;
    let wfile = p.display().to_string();
    let tree = Located::parse(&text).map_err(|e| ScenarioError {
        source: wfile.clone(),
        pos: e.pos,
        field: String::new(),
        value: None,
        reason: format!("not valid YAML: {}", e.message),
    })?;
    let segs = [Seg::Key("workload".into()), Seg::Key("mix".into())];
    let mut mix = tree.value.clone();
    resolve_mix_files(&mut mix, p.parent().unwrap_or(Path::new(".")));
    overrides::apply(value, &segs, mix).map_err(|e| src.error("workload.mix", None, e, false))?;
    src.mounts.push(("workload.mix".into(), wfile, tree));
    Ok(())
}

/// serde's messages end with a location we do not have ("at line 1 column 2" never
/// appears for JSON values, but keep the text short and single-line anyway).
fn tidy_serde_message(m: &str) -> String {
    m.lines().next().unwrap_or(m).to_string()
}

/// JSON Schema of the scenario file.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Scenario)).unwrap_or_default()
}
