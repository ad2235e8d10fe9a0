//! Getting haq and qualifying with it, as the docs say (issue 20 items 6, 7): the
//! Dockerfile is well-formed and copies what exists (no docker daemon is needed: the
//! CI workflow builds it), the release and CI workflows build and publish what the
//! README promises, every scenario in docs/qualify-a-real-cluster.md passes `haq
//! validate`, and every ID the README cites is defined in docs/requirements.md.

use crate::support::root;

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn yaml(path: &str) -> serde_json::Value {
    serde_saphyr::from_str(&read(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Dockerfile's instructions: (keyword, arguments), continuation lines joined.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        pending.push_str(l.trim_end_matches('\\'));
        pending.push(' ');
        if l.ends_with('\\') {
            continue;
        }
        let (k, a) = pending
            .trim()
            .split_once(' ')
            .unwrap_or((pending.trim(), ""));
        out.push((k.to_string(), a.trim().to_string()));
        pending.clear();
    }
    out
}

#[test]
fn the_dockerfile_is_well_formed_and_copies_what_exists() {
    let ins = instructions(&read("Dockerfile"));
    const KNOWN: [&str; 10] = [
        "FROM",
        "RUN",
        "COPY",
        "WORKDIR",
        "USER",
        "ENTRYPOINT",
        "CMD",
        "ENV",
        "ARG",
        "LABEL",
    ];
    for (k, a) in &ins {
        assert!(KNOWN.contains(&k.as_str()), "unknown instruction {k} {a}");
        assert!(!a.is_empty(), "{k} without arguments");
    }
    assert_eq!(ins[0].0, "FROM", "starts with FROM");
    let froms: Vec<&String> = ins.iter().filter(|i| i.0 == "FROM").map(|i| &i.1).collect();
    assert_eq!(
        froms.len(),
        2,
        "a build stage and a small runtime stage: {froms:?}"
    );
    for f in &froms {
        let image = f.split_whitespace().next().unwrap_or_default();
        assert!(
            image.contains(':') && !image.ends_with(":latest"),
            "pin {image}"
        );
    }
    assert!(
        froms[1].starts_with("alpine:"),
        "a small base: {}",
        froms[1]
    );
    assert!(
        ins.iter()
            .any(|(k, a)| k == "RUN" && a.contains("cargo build --release --locked")),
        "builds with the lock file"
    );
    let ignored: Vec<String> = read(".dockerignore")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .map(str::to_string)
        .collect();
    for (k, a) in &ins {
        if k != "COPY" || a.starts_with("--from=") {
            continue;
        }
        let parts: Vec<&str> = a.split_whitespace().collect();
        for src in &parts[..parts.len() - 1] {
            assert!(
                root().join(src).exists(),
                "COPY {src}: not in the repository"
            );
            assert!(
                !ignored
                    .iter()
                    .any(|i| i == src || src.starts_with(&format!("{i}/"))),
                "COPY {src}: excluded by .dockerignore"
            );
        }
    }
    let entry = ins
        .iter()
        .find(|i| i.0 == "ENTRYPOINT")
        .expect("an entrypoint");
    assert!(entry.1.contains("\"haq\""), "{}", entry.1);
    // The image's own scenarios are where the CI workflow's smoke test reads them.
    let ci = read(".github/workflows/ci.yml");
    assert!(
        ci.contains("docker build -t haq .") && ci.contains("/opt/haq/scenarios/quickstart.yaml")
    );
    assert!(
        ins.iter()
            .any(|(k, a)| k == "COPY" && a == "scenarios /opt/haq/scenarios")
    );
}

#[test]
fn the_release_workflow_builds_what_the_readme_promises() {
    let w = yaml(".github/workflows/release.yml");
    let targets = &w["jobs"]["binaries"]["strategy"]["matrix"]["target"];
    assert_eq!(
        targets,
        &serde_json::json!(["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"])
    );
    let text = read(".github/workflows/release.yml");
    for want in [
        "cross build --release --locked --target ${{ matrix.target }} --bin haq",
        "statically linked",
        "softprops/action-gh-release",
        "platforms: linux/amd64,linux/arm64",
        "ghcr.io/${{ github.repository }}",
        "haq-${{ matrix.target }}.sha256",
    ] {
        assert!(text.contains(want), "release.yml lacks {want:?}");
    }
    let readme = read("README.md");
    for want in [
        "cargo install --locked --path .",
        "cargo install --locked --git",
        "haq-x86_64-unknown-linux-musl",
        "haq-aarch64-unknown-linux-musl",
        "docker build -t haq .",
        // The image runs as its own user: a bind mount is written as the caller's.
        "docker run --rm --user \"$(id -u):$(id -g)\"",
        "none is published",
    ] {
        assert!(readme.contains(want), "README lacks {want:?}");
    }
    // Nothing the README offers to download is a placeholder.
    assert!(
        !readme.contains("OWNER/"),
        "README names a placeholder repository"
    );
}

#[test]
fn the_ci_examples_qualify_publish_and_keep_the_run() {
    let gh = read("examples/ci/github-actions.yml");
    let steps = yaml("examples/ci/github-actions.yml")["jobs"]["qualify"]["steps"].clone();
    assert!(steps.as_array().is_some_and(|s| s.len() >= 6), "{steps}");
    for want in [
        "haq validate \"$SCENARIO\"",
        "haq run \"$SCENARIO\" --out run",
        "cat run/report.md >> \"$GITHUB_STEP_SUMMARY\"",
        "report_paths: run/junit.xml",
        "actions/upload-artifact",
        "sha256sum -c",
        "if: always()",
    ] {
        assert!(gh.contains(want), "github-actions.yml lacks {want:?}");
    }
    let gl = yaml("examples/ci/gitlab-ci.yml");
    let job = &gl["qualify-staging"];
    assert_eq!(job["artifacts"]["reports"]["junit"], "run/junit.xml");
    assert_eq!(job["artifacts"]["when"], "always");
    assert!(
        job["script"].as_array().is_some_and(|s| s
            .iter()
            .any(|l| l.as_str().is_some_and(|l| l.starts_with("haq run")))),
        "{job}"
    );
}

/// The fenced YAML blocks of a Markdown file that are whole scenarios.
pub(crate) fn scenarios_in(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut block: Option<String> = None;
    for line in read(doc).lines() {
        match (&mut block, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => block = Some(String::new()),
            (Some(b), l) if l.starts_with("```") => {
                if b.starts_with("name:") {
                    out.push(std::mem::take(b));
                }
                block = None;
            }
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            (None, _) => {}
        }
    }
    out
}

#[test]
fn every_scenario_in_the_real_cluster_guide_validates() {
    let found = scenarios_in("docs/qualify-a-real-cluster.md");
    assert!(found.len() >= 2, "{found:?}");
    for text in &found {
        let name = text.lines().next().unwrap_or_default().to_string();
        let plan = haq::plan::load_str(text, "guide.yaml", &root().join("docs"), &[], None)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            plan.scenario.target.kind,
            haq::scenario::TargetKind::Url,
            "{name}"
        );
    }
}

#[test]
fn every_requirement_id_the_readme_cites_is_defined_in_the_repository() {
    let req = read("docs/requirements.md");
    let readme = read("README.md");
    let mut missing = Vec::new();
    for w in readme.split(|c: char| !c.is_ascii_alphanumeric()) {
        let id = w.strip_prefix('M').or_else(|| w.strip_prefix('Q'));
        if id
            .is_some_and(|n| !n.is_empty() && n.len() <= 2 && n.chars().all(|c| c.is_ascii_digit()))
            && !req.contains(&format!("**{w}**"))
        {
            missing.push(w.to_string());
        }
    }
    missing.dedup();
    assert!(
        missing.is_empty(),
        "README cites {missing:?}, not in docs/requirements.md"
    );
    assert!(!readme.contains("SPEC.md") && !readme.contains("DESIGN.md"));
    for v in haq::check::VERDICTS {
        let anchor = haq::report::look::doc(v);
        if let Some(a) = anchor.strip_prefix("docs/requirements.md#") {
            assert!(req.contains(&format!("<a id=\"{a}\"></a>")), "no #{a}");
        }
    }
}
