//! The command line (clap derive, [`args`]). `main` parses and calls [`execute`];
//! tests call it in-process. The one place that maps a run's outcome to the process
//! exit code (0 PASS · 1 FAIL or UNKNOWN · 2 unusable or INVALID · 3 interrupted).

mod args;
pub mod capacity;
mod dry_run;
mod exit;
mod proxyd;
mod sim;

pub use args::*;
pub use exit::{Exit, exit_for_run};

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::{EnvironmentError, RunOptions};
use crate::report::compare;
use crate::scenario;
use crate::scenario::words::plural;

/// What haq says when a signal stops `cmd` (stopping a run heals its faults and writes
/// a partial report; stopping `sim up` stops its processes; a second signal ends haq
/// at once, [`cancel_on_signals`]).
pub fn interrupted_message(cmd: &Command) -> &'static str {
    match cmd {
        Command::Run(_) | Command::Capacity(_) => {
            "haq: interrupted; stopping the load and healing faults, then judging what completed before the signal (a second Ctrl-C ends haq at once: heals not done by then stay open in RUN_DIR/heals.jsonl for `haq heal RUN_DIR`)"
        }
        Command::Sim(s) if matches!(s.command, SimCommand::Up(_)) => {
            "haq: interrupted; stopping the sim's processes (a second Ctrl-C ends haq at once)"
        }
        _ => "haq: interrupted; stopping (a second Ctrl-C ends haq at once)",
    }
}

/// How long haq may still take after a second SIGINT/SIGTERM.
const SECOND_SIGNAL_GRACE: Duration = Duration::from_secs(2);

/// Cancels `token` on SIGINT or SIGTERM, saying `message` on stderr. A second one
/// ends haq within [`SECOND_SIGNAL_GRACE`], exit 3: the commands running (a heal) are
/// killed and none is started, so the heals not done stay open in their run's heal
/// ledger (said, with the `haq heal` to run); if haq has not ended by then, it ends
/// there, its commands' process groups with it.
pub fn cancel_on_signals(token: CancellationToken, message: &'static str) {
    use tokio::signal::unix::{SignalKind, signal};
    tokio::spawn(async move {
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        eprintln!("{message}");
        token.cancel();
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        end_soon();
    });
}

/// A second signal: heals are abandoned now, and haq ends within
/// [`SECOND_SIGNAL_GRACE`] whatever it is doing.
fn end_soon() {
    eprintln!(
        "haq: second signal; stopping the heals still running, ending within {} s",
        SECOND_SIGNAL_GRACE.as_secs()
    );
    crate::target::group::abandon();
    std::thread::spawn(|| {
        std::thread::sleep(SECOND_SIGNAL_GRACE);
        say_left_open();
        crate::target::group::end_all(Duration::from_millis(500));
        eprintln!("haq: ended by the second signal");
        std::process::exit(Exit::Interrupted as i32);
    });
}

/// Says, once, what the run's heal ledger leaves applied and how to heal it.
fn say_left_open() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::SeqCst) {
        return;
    }
    for (dir, open) in crate::faults::ledger::left_open_here() {
        for o in &open {
            eprintln!(
                "haq: NOT healed: {} on {} (undone by {}; open in {})",
                o.fault,
                o.replica,
                o.remedy.what(),
                dir.join(crate::trace::files::HEALS_FILE).display()
            );
        }
        eprintln!(
            "haq: heal them with: haq heal {} (the next `haq run` against this target does it too)",
            dir.display()
        );
    }
}

/// Runs one command to completion.
pub async fn execute(cli: Cli, cancel: CancellationToken) -> Exit {
    match cli.command {
        Command::Run(a) => run(a, cancel).await,
        Command::Validate(a) => validate(&a),
        Command::Check(a) => match crate::check::judge_dir(&a.run_dir) {
            Ok((plan, j)) => {
                print!("{}", crate::report::terminal(&plan, &j, &a.run_dir));
                exit_for_run(&j)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                Exit::Unusable
            }
        },
        Command::Report(a) => match crate::report::judge_writing_hlog(&a.run_dir) {
            Ok((plan, j)) => {
                match crate::report::write(&a.run_dir, &plan, &j, &crate::report::EVERY) {
                    Ok(files) => {
                        print!("{}", crate::report::terminal(&plan, &j, &a.run_dir));
                        println!("wrote {} in {}", files.join(", "), a.run_dir.display());
                        exit_for_run(&j)
                    }
                    Err(e) => {
                        eprintln!("error: writing the reports in {}: {e}", a.run_dir.display());
                        Exit::Unusable
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                Exit::Unusable
            }
        },
        Command::Heal(a) => {
            // Off the async threads, so that a signal is handled: it stops the heal
            // commands running (what they did not heal stays open in the ledger).
            let stop = cancel.clone();
            tokio::spawn(async move {
                stop.cancelled().await;
                crate::target::group::abandon();
            });
            let done = tokio::task::spawn_blocking(move || heal(&a.run_dir)).await;
            match done {
                _ if crate::target::group::abandoned() => Exit::Interrupted,
                Ok(exit) => exit,
                Err(_) => Exit::Unusable,
            }
        }
        Command::Compare(a) => compare_runs(&a),
        Command::Schema => {
            println!(
                "{}",
                serde_json::to_string_pretty(&scenario::json_schema()).unwrap_or_default()
            );
            Exit::Pass
        }
        Command::Init(a) => init(a),
        Command::Proxy(a) => proxyd::proxy_daemon(a, cancel).await,
        Command::Sim(s) => sim::sim(s.command, cancel).await,
        Command::Bench(b) => bench(b.command).await,
        Command::Agent(a) => agent(a, cancel).await,
        Command::Capacity(a) => capacity::command(a, cancel).await,
    }
}

/// `haq validate`: every error, or the warnings and a summary line — and with `-o`,
/// the effective scenario on stdout (the summary then goes to stderr).
fn validate(a: &ValidateArgs) -> Exit {
    let crate::plan::Checked { plan, warnings } =
        match crate::plan::check(&a.scenario, &a.overrides.set, a.overrides.seed) {
            Ok(c) => c,
            Err(all) => {
                for e in &all {
                    eprintln!("error: {e}");
                }
                return Exit::Unusable;
            }
        };
    for w in &warnings {
        eprintln!("warning: {w}");
    }
    let summary = format!(
        "{}: valid · {} over {:.0}s · {:.2} req/s offered (protected {}) · {} · seed {}",
        a.scenario.display(),
        plural(plan.phases.len() as u64, "phase"),
        plan.total.as_secs_f64(),
        plan.rate,
        plan.scenario.protected_load,
        plural(plan.faults.len() as u64, "fault"),
        plan.seed
    );
    let effective = plan.scenario.redacted();
    let doc = match a.output {
        None => {
            println!("{summary}");
            return Exit::Pass;
        }
        Some(OutputFormat::Json) => serde_json::to_string_pretty(&effective)
            .map(|j| j + "\n")
            .map_err(|e| e.to_string()),
        Some(OutputFormat::Yaml) => serde_saphyr::to_string(&effective)
            .map(|y| {
                format!(
                    "# effective scenario of {} (defaults filled, overrides applied, workload inlined, credentials redacted)\n{y}",
                    a.scenario.display()
                )
            })
            .map_err(|e| e.to_string()),
    };
    match doc {
        Ok(d) => {
            print!("{d}");
            eprintln!("{summary}");
            Exit::Pass
        }
        Err(e) => {
            eprintln!("error: printing the effective scenario: {e}");
            Exit::Unusable
        }
    }
}

async fn run(a: RunArgs, cancel: CancellationToken) -> Exit {
    let plan = match crate::plan::check(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            c.plan
        }
        Err(all) => {
            for e in &all {
                eprintln!("error: {e}");
            }
            return Exit::Unusable;
        }
    };
    if a.dry_run {
        return dry_run(&plan, &a);
    }
    let opts = RunOptions {
        agents: (a.agents > 1).then(|| crate::engine::agents::Agents {
            count: a.agents,
            scenario: a.scenario.clone(),
            sets: a.overrides.set.clone(),
            kube: crate::engine::agents::OnKube::of(&plan),
        }),
        out: a.out,
        reports_dir: a.reports_dir,
        quiet: a.quiet,
        haq_bin: None,
    };
    let interrupt = cancel.clone();
    let exit = match crate::run(plan, opts, cancel).await {
        Ok(r) => {
            print!(
                "{}",
                crate::report::terminal(&r.plan, &r.judgement, &r.run_dir)
            );
            exit_for_run(&r.judgement)
        }
        // SIGINT/SIGTERM before the load began: nothing was measured, nothing is left
        // applied (the target's start is undone as on any error).
        Err(e) if interrupt.is_cancelled() => {
            eprintln!("haq: interrupted before the load began: {e:#}");
            Exit::Interrupted
        }
        Err(e) if e.downcast_ref::<EnvironmentError>().is_some() => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
        Err(e) => {
            eprintln!("error: the run failed: {e:#}");
            Exit::Unusable
        }
    };
    // A command a second signal cut short, and what that signal left applied.
    let _ =
        tokio::task::spawn_blocking(|| crate::target::group::end_all(Duration::from_secs(2))).await;
    say_left_open();
    if crate::target::group::abandoned() {
        return Exit::Interrupted;
    }
    exit
}

/// `haq agent`: one share of a `haq run --agents N` (exit 0 when it was sent).
async fn agent(a: AgentArgs, cancel: CancellationToken) -> Exit {
    let plan = match crate::plan::load(&a.scenario, &a.overrides.set, a.overrides.seed) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Exit::Unusable;
        }
    };
    let done = match (&a.assignment, &a.coordinator) {
        (Some(file), _) => crate::engine::agents::agent(plan, file, cancel).await,
        (None, Some(url)) => {
            let (Some(index), Some(key)) = (a.index, a.key.as_deref()) else {
                eprintln!(
                    "haq agent: --coordinator needs --index (or JOB_COMPLETION_INDEX) and --key (or HAQ_AGENT_KEY)"
                );
                return Exit::Unusable;
            };
            let work = a.work_dir.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("haq-agent-{index}-{}", std::process::id()))
            });
            crate::engine::agents::remote_agent(plan, (url, key), index, &work, cancel).await
        }
        (None, None) => Err(anyhow::anyhow!("--assignment or --coordinator is needed")),
    };
    match done {
        Ok(()) => Exit::Pass,
        Err(e) => {
            eprintln!("haq agent: {e:#}");
            Exit::Unusable
        }
    }
}

/// `haq run --dry-run`: the plan in words, and for a `kind: kubernetes` target every
/// API call the run would make (with `--agents N` and `agents.kubernetes`, the agents'
/// Job's too); nothing is started, no call is made.
fn dry_run(plan: &crate::plan::Plan, a: &RunArgs) -> Exit {
    use crate::plan::kubernetes::{ContextSource, check_context};
    print!("{}", dry_run::render(plan));
    let Some(k) = plan.scenario.target.kubernetes.as_ref() else {
        return Exit::Pass;
    };
    match check_context(k, &ContextSource::read()) {
        Ok(context) => {
            print!("\n{}", crate::target::kube::dryrun::render(plan, &context));
            let file = a.scenario.file_name().and_then(|f| f.to_str());
            let agents = (a.agents > 1).then(|| {
                crate::target::kube::jobs::dry_steps(
                    plan,
                    a.agents,
                    file.unwrap_or_default(),
                    &a.overrides.set,
                )
            });
            for st in agents.into_iter().flatten() {
                println!("{:<28} {}", st.when, st.note);
            }
            Exit::Pass
        }
        Err(i) => {
            eprintln!("error: `{}`: {}", i.field, i.reason);
            Exit::Unusable
        }
    }
}

/// `haq init`: the starter scenario on stdout when asked (`-`) or when stdout is not a
/// terminal and no path was given (`haq init > s.yaml`: nothing but the scenario goes
/// there), else written to the path (default scenario.yaml); messages on stderr.
fn init(a: InitArgs) -> Exit {
    use std::io::IsTerminal;
    let path = match a.path {
        Some(p) if p.as_os_str() != "-" => p,
        Some(_) => return starter_to_stdout(),
        None if !std::io::stdout().is_terminal() => return starter_to_stdout(),
        None => std::path::PathBuf::from("scenario.yaml"),
    };
    if path.exists() && !a.force {
        eprintln!(
            "error: {} exists (use --force to overwrite)",
            path.display()
        );
        return Exit::Unusable;
    }
    match std::fs::write(&path, STARTER) {
        Ok(()) => {
            eprintln!(
                "wrote {} — try: haq validate {0} && haq run {0}",
                path.display()
            );
            Exit::Pass
        }
        Err(e) => {
            eprintln!("error: writing {}: {e}", path.display());
            Exit::Unusable
        }
    }
}

fn starter_to_stdout() -> Exit {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(STARTER.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Exit::Pass,
        Err(e) => {
            eprintln!("error: writing the scenario to stdout: {e}");
            Exit::Unusable
        }
    }
}

async fn bench(cmd: BenchCommand) -> Exit {
    let r = match cmd {
        BenchCommand::Server { listen, shape } => {
            crate::wire::fds::raise_fd_limit();
            crate::bench::server::serve(crate::bench::server::ServerConfig { listen, shape }).await
        }
        BenchCommand::Client {
            streams,
            shape,
            duration,
            rate,
            out,
            json,
            bare,
            transport,
            agents,
        } => {
            let cfg = crate::bench::BenchConfig {
                bare,
                transport,
                agents,
                streams,
                shape,
                duration,
                rate,
                out,
            };
            crate::bench::run(cfg).await.map(|r| {
                if json {
                    println!("{}", serde_json::to_string(&r).unwrap_or_default());
                } else {
                    println!("{r}");
                }
            })
        }
    };
    match r {
        Ok(()) => Exit::Pass,
        Err(e) => {
            eprintln!("error: {e:#}");
            Exit::Unusable
        }
    }
}

/// The starter scenario `haq init` writes.
pub const STARTER: &str = include_str!("../starter.yaml");

/// `haq compare`: judges both runs from their traces, refuses them when they are not
/// like for like (unless `--allow-different`), prints the comparison (or its JSON)
/// and returns the exit code (0 no regression, 1 regressed, 2 unusable input).
fn compare_runs(a: &CompareArgs) -> Exit {
    let judged =
        |dir: &Path| -> anyhow::Result<(crate::plan::Plan, crate::check::Judgement, Vec<u8>)> {
            let mut hlog = Vec::new();
            let (plan, j) = crate::check::judge_dir_with(dir, Some(&mut hlog))?;
            Ok((plan, j, hlog))
        };
    let (ra, rb) = match (judged(&a.run_a), judged(&a.run_b)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("error: {e:#}");
            return Exit::Unusable;
        }
    };
    let (pa, pb) = (a.phase_a.as_deref(), a.phase_b.as_deref());
    let sides = compare::side(&a.run_a, &ra.1, &ra.2, pa)
        .and_then(|sa| Ok((sa, compare::side(&a.run_b, &rb.1, &rb.2, pb)?)));
    let (sa, sb) = match sides {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Exit::Unusable;
        }
    };
    let differences = compare::differences(
        &compare::Of {
            plan: &ra.0,
            phase: pa,
        },
        &compare::Of {
            plan: &rb.0,
            phase: pb,
        },
    );
    let refuse = compare::refused(&differences) && !a.allow_different;
    if refuse {
        for d in &differences {
            let level = match d.effect {
                compare::Effect::Refuse => "error",
                compare::Effect::Warn => "warning",
            };
            eprintln!("{level}: {}: {d}", compare::said(d.effect));
        }
        eprintln!(
            "error: refusing to compare runs that differ (--allow-different compares them anyway, with these warnings)"
        );
    }
    let same_run = std::fs::canonicalize(&a.run_a).ok() == std::fs::canonicalize(&a.run_b).ok();
    let verdicts = if same_run {
        Vec::new()
    } else {
        compare::verdict_diff(&ra.1, &rb.1)
    };
    let t = compare::Thresholds {
        max_regression: a.max_regression,
        max_error_increase: a.max_error_increase,
    };
    let mut c = compare::compare(sa, sb, t, verdicts, differences);
    c.refused = refuse;
    if a.json {
        // Refused too: the document says so (`refused`) and names every difference.
        match serde_json::to_string_pretty(&c) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("error: {e}");
                return Exit::Unusable;
            }
        }
    } else if !refuse {
        print!("{}", compare::render(&c));
    }
    if refuse {
        return Exit::Unusable;
    }
    if c.regressed { Exit::Fail } else { Exit::Pass }
}

/// `haq heal RUN_DIR`: undoes what the ledger of a killed run leaves open, then (a
/// kubernetes run) sweeps what carries the run's labels.
fn heal(dir: &Path) -> Exit {
    let ledger = heal_ledger(dir);
    if matches!(ledger, Exit::Unusable) {
        return ledger;
    }
    // A kubernetes run: what carries its labels, whether or not the ledger had it.
    match crate::target::kube::sweep::sweep_dir(dir) {
        Some((true, d)) => println!("swept: {d}"),
        Some((false, d)) => {
            println!("NOT swept: {d}");
            return Exit::Fail;
        }
        None => {}
    }
    ledger
}

fn heal_ledger(dir: &Path) -> Exit {
    match crate::faults::ledger::heal_dir(dir) {
        Err(e) => {
            eprintln!("error: {e}");
            Exit::Unusable
        }
        Ok(done) if done.is_empty() => {
            println!("{}: nothing left applied", dir.display());
            Exit::Pass
        }
        Ok(done) => {
            for d in &done {
                println!(
                    "{} {} on {}: {}",
                    if d.ok { "healed" } else { "NOT healed" },
                    d.entry.fault,
                    d.entry.replica,
                    d.detail
                );
            }
            if done.iter().all(|d| d.ok) {
                Exit::Pass
            } else {
                Exit::Fail
            }
        }
    }
}
