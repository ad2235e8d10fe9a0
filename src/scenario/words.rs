//! Words for people: counts with the right plural (`1 request`, `2 requests`), lists.

/// `n word`, with `word` made plural (an `s`, or `ies` after a consonant and `y`)
/// unless `n` is 1: `plural(1, "fault")` is `1 fault`, `plural(3, "entry")` `3 entries`.
pub fn plural(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    format!("{n} {}", noun(n, word))
}

/// `word` as it goes with `n` (without the number).
pub fn noun(n: u64, word: &str) -> String {
    if n == 1 {
        return word.to_string();
    }
    match word.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'o', 'u']) => format!("{stem}ies"),
        _ if word.ends_with('s') || word.ends_with("sh") || word.ends_with("ch") => {
            format!("{word}es")
        }
        _ => format!("{word}s"),
    }
}

/// `a`, `a and b`, `a, b and c`.
pub fn and_list<S: AsRef<str>>(items: &[S]) -> String {
    match items {
        [] => String::new(),
        [a] => a.as_ref().to_string(),
        [rest @ .., last] => format!(
            "{} and {}",
            rest.iter()
                .map(AsRef::as_ref)
                .collect::<Vec<_>>()
                .join(", "),
            last.as_ref()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plurals_and_lists_read_as_english() {
        assert_eq!(plural(1u64, "request"), "1 request");
        assert_eq!(plural(0u64, "request"), "0 requests");
        assert_eq!(plural(2u64, "entry"), "2 entries");
        assert_eq!(plural(2u64, "day"), "2 days");
        assert_eq!(plural(2u64, "process"), "2 processes");
        assert_eq!(and_list(&["a"]), "a");
        assert_eq!(and_list(&["a", "b", "c"]), "a, b and c");
    }
}

/// The name a scenario or a trace gives a value (its serde name, `best_effort`,
/// `process_started`): what a person reads too, never a Rust variant (`BestEffort`).
pub fn name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// As [`name`], with the words apart (`process started`, `best effort`).
pub fn human<T: serde::Serialize>(v: &T) -> String {
    name(v).replace('_', " ")
}

#[cfg(test)]
mod name_tests {
    use super::*;

    #[test]
    fn names_are_the_files_not_the_codes() {
        assert_eq!(name(&crate::scenario::Priority::BestEffort), "best_effort");
        assert_eq!(name(&crate::scenario::TargetKind::Sim), "sim");
        assert_eq!(human(&crate::scenario::PhaseKind::Baseline), "baseline");
        assert_eq!(human(&crate::scenario::Fate::Reroute), "reroute");
    }
}
