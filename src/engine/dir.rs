//! The run directory: made new for each run (never over another run), with the
//! effective scenario and the workload's input files kept in it (M10).

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};

use crate::plan::Plan;
use crate::scenario::HeaderSource;
use crate::trace;

fn utc_stamp() -> String {
    chrono::Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

/// `out`, or a new `<reports_dir>/<scenario>-<UTC time>` (never one that holds a run).
pub fn make_run_dir(
    plan: &Plan,
    out: Option<&Path>,
    reports_dir: &Path,
) -> anyhow::Result<PathBuf> {
    let dir = match out {
        Some(d) => d.to_path_buf(),
        None => {
            let base = reports_dir.join(format!("{}-{}", plan.scenario.name, utc_stamp()));
            let mut d = base.clone();
            let mut k = 1;
            while d.exists() {
                k += 1;
                d = PathBuf::from(format!("{}-{k}", base.display()));
            }
            d
        }
    };
    if dir.join(trace::TRACE_FILE).exists() {
        anyhow::bail!(
            "{} already holds a run; choose another --out",
            dir.display()
        );
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The effective scenario as the run keeps it: a credential header written as a value
/// (not through `env` or `file`) is kept as `[redacted]`.
fn recorded(plan: &Plan) -> crate::scenario::Scenario {
    let mut s = plan.scenario.clone();
    for (k, v) in &mut s.target.headers {
        if let HeaderSource::Value(x) = v
            && crate::wire::redact::is_credential(k)
        {
            *x = crate::wire::redact::REDACTED.into();
        }
    }
    s
}

pub fn record_scenario(dir: &Path, plan: &Plan) -> anyhow::Result<()> {
    let scenario = recorded(plan);
    let json = serde_json::to_string_pretty(&scenario)?;
    std::fs::write(dir.join(trace::files::SCENARIO_FILE), json + "\n")?;
    let yaml = serde_saphyr::to_string(&scenario).map_err(|e| anyhow!("{e}"))?;
    std::fs::write(
        dir.join(trace::files::SCENARIO_YAML),
        format!("# effective scenario of this run (overrides applied, workload inlined)\n{yaml}"),
    )?;
    // The files the workload read (empirical lengths, replayed traces), kept with the
    // run so it can be replayed (M10).
    if !plan.inputs.files.is_empty() {
        let inputs = dir.join("inputs");
        std::fs::create_dir_all(&inputs)?;
        for f in &plan.inputs.files {
            let src = Path::new(f);
            if let Some(name) = src.file_name() {
                std::fs::copy(src, inputs.join(name))
                    .with_context(|| format!("keeping a copy of {f}"))?;
            }
        }
    }
    Ok(())
}
