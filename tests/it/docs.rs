//! The docs name tests and source files; they must exist (docs/verdicts.md is the list
//! of the tests that show each verdict PASS and FAIL).

use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`, read.
fn sources(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).expect("dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(std::fs::read_to_string(&p).expect("read"));
        }
    }
}

/// The backticked words of `text` that look like a test path (`a::b::name`, `…::name`).
fn test_paths(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.contains("::") && !w.contains(' ') && !w.contains('('))
        .filter(|w| w.starts_with("it::") || w.contains("tests::") || w.starts_with('…'))
        .map(|w| {
            w.rsplit("::")
                .next()
                .unwrap_or(w)
                .trim_end_matches('…')
                .to_string()
        })
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

#[test]
fn tests_named_in_the_docs_exist() {
    let mut code = Vec::new();
    sources(&root().join("src"), &mut code);
    sources(&root().join("tests"), &mut code);
    let mut missing = Vec::new();
    for doc in [
        "docs/verdicts.md",
        "docs/request-fate.md",
        "docs/evidence.md",
    ] {
        let text = std::fs::read_to_string(root().join(doc)).expect("doc");
        for name in test_paths(&text) {
            // `…::quickstart_…` names a test by its start.
            let fun = format!("fn {name}");
            if !code.iter().any(|c| c.contains(&fun)) {
                missing.push(format!("{doc}: no test `{name}`"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn source_files_named_in_the_docs_exist() {
    let mut missing = Vec::new();
    let mut docs: Vec<String> = vec!["README.md".into(), "reports/README.md".into()];
    for e in std::fs::read_dir(root().join("docs"))
        .expect("docs")
        .flatten()
    {
        docs.push(format!("docs/{}", e.file_name().to_string_lossy()));
    }
    for doc in docs {
        let text = std::fs::read_to_string(root().join(&doc)).expect("doc");
        for w in text.split(|c: char| c.is_whitespace() || "`()[],;:".contains(c)) {
            let w = w.trim_end_matches('.');
            let placeholder = w.contains('<') || w.contains('*');
            if (w.starts_with("src/") || w.starts_with("tests/"))
                && w.ends_with(".rs")
                && !placeholder
                && !root().join(w).exists()
            {
                missing.push(format!("{doc}: {w}"));
            }
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}
