//! The one error a bad scenario produces: what, where, the value, and why.

use std::fmt;

use super::located::Pos;

#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioError {
    /// The file the problem is in, or `--set PATH=VALUE` for an override.
    pub source: String,
    pub pos: Option<Pos>,
    /// Dotted field path (`phases[1].duration`); empty for the whole document.
    pub field: String,
    /// The offending value as written, when there is one.
    pub value: Option<String>,
    pub reason: String,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)?;
        if let Some(p) = self.pos {
            write!(f, ":{p}")?;
        }
        f.write_str(": ")?;
        if !self.field.is_empty() {
            write!(f, "`{}`: ", self.field)?;
        }
        f.write_str(&self.reason)?;
        if let Some(v) = &self.value {
            write!(f, " (value: {v})")?;
        }
        Ok(())
    }
}

impl std::error::Error for ScenarioError {}

/// Sorts problems as a reader meets them: `--set` overrides first (the command line),
/// then each file's in line and column order (the scenario file `main` before the files
/// it names, which keep their first-mention order).
pub fn sort_in_file_order(errors: &mut [ScenarioError], main: &str) {
    let mut files: Vec<String> = vec![main.to_string()];
    for e in errors.iter() {
        if !e.source.starts_with("--set ") && !files.contains(&e.source) {
            files.push(e.source.clone());
        }
    }
    errors.sort_by_key(|e| {
        let file = files.iter().position(|f| *f == e.source);
        (file.is_some(), file, e.pos.map(|p| (p.line, p.col)))
    });
}

/// A semantic problem found by validation, before it is given a location.
#[derive(Debug, Clone, PartialEq)]
pub struct Issue {
    pub field: String,
    pub value: Option<String>,
    pub reason: String,
}

impl Issue {
    pub fn new(
        field: impl Into<String>,
        value: impl fmt::Display,
        reason: impl Into<String>,
    ) -> Self {
        Issue {
            field: field.into(),
            value: Some(value.to_string()),
            reason: reason.into(),
        }
    }
    pub fn missing(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Issue {
            field: field.into(),
            value: None,
            reason: reason.into(),
        }
    }
}
