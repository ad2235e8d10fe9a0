//! Replacement after a kill or a drain (Q6, Q11): haq starts a new replica (the sim
//! respawns its worker with the scenario's cold-start delay; a `url` replica's restart
//! command runs) and records each stage it can see: requested, process started,
//! ready (its readiness path answers 2xx), first request served (the proxy saw an
//! inference request through it answered in full).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::registry::{ProcRef, Replica, SimSpawner};
use super::schedule::{Env, wait};
use crate::scenario::FaultPlan;
use crate::trace::{Event, ReplacementStage};

fn emit(
    env: &Env,
    f: &FaultPlan,
    r: &Replica,
    stage: ReplacementStage,
    pid: Option<u32>,
    detail: Option<String>,
) {
    if let Some(d) = &detail {
        (env.say)(format!(
            "replacement of {} ({}): {stage:?} — {d}",
            r.name, f.name
        ));
    }
    env.trace.emit(Event::Replacement {
        t: env.clock.now_us(),
        fault: f.name.clone(),
        replica: r.name.clone(),
        stage,
        pid,
        detail,
    });
}

/// Starts a replacement for `r` and follows it to its first served request.
pub async fn run(f: &FaultPlan, r: &Arc<Replica>, env: &Env) {
    let Some(spec) = &f.restart else { return };
    if !wait(env, spec.after.0).await {
        return;
    }
    emit(env, f, r, ReplacementStage::Requested, None, None);
    let started = match &env.registry.sim {
        Some(sim) => start_sim(r, sim, spec.cold_start.map(|d| d.0), &env.load_done).await,
        None => start_command(f, r, env, spec.cold_start.map(|d| d.0)).await,
    };
    let (pid, how) = match started {
        Ok(s) => s,
        Err(e) => {
            return emit(env, f, r, ReplacementStage::Failed, None, Some(e));
        }
    };
    emit(env, f, r, ReplacementStage::ProcessStarted, pid, Some(how));
    let served_base = r.proxy.as_ref().map(|p| *p.served().borrow());
    let ready = spec.ready_timeout.0;
    match poll_ready(r, env, ready).await {
        Some(d) => emit(
            env,
            f,
            r,
            ReplacementStage::Ready,
            pid,
            Some(format!("ready after {:.0}ms", d.as_secs_f64() * 1e3)),
        ),
        None => {
            return emit(
                env,
                f,
                r,
                ReplacementStage::Failed,
                pid,
                Some(format!(
                    "not ready within {ready:?} (or the load ended first)"
                )),
            );
        }
    }
    let (Some(p), Some(base)) = (&r.proxy, served_base) else {
        return;
    };
    let mut rx = p.served();
    tokio::select! {
        r2 = rx.wait_for(|n| *n > base) => {
            if r2.is_ok() {
                emit(env, f, r, ReplacementStage::FirstRequestServed, pid, Some("first inference request answered in full through the proxy".into()));
            }
        }
        _ = env.load_done.cancelled() => {}
    }
}

async fn start_sim(
    r: &Replica,
    sim: &SimSpawner,
    cold_start: Option<Duration>,
    stop: &tokio_util::sync::CancellationToken,
) -> Result<(Option<u32>, String), String> {
    let Some(ProcRef::Sim(shared)) = r.process() else {
        return Err("no sim process handle".into());
    };
    let mut engine = sim.target.engine.for_replacement();
    if let Some(c) = cold_start {
        engine.startup = crate::wire::units::Dur(c);
    }
    // Delete, then create (a rolling update with no surge): a drained predecessor first
    // finishes its streams — its leases are renewed and its events relayed through the
    // same path the replacement will take. A crashed one is gone already.
    let grace = drain_grace(sim);
    let t0 = std::time::Instant::now();
    let old_url = loop {
        {
            let mut w = shared.lock().await;
            if w.exited().is_some() {
                break w.url.clone();
            }
            if t0.elapsed() > grace {
                return Err(format!(
                    "{} (pid {}) still running {grace:?} after it was asked to stop",
                    r.name, w.pid
                ));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => return Err("the load ended before the predecessor exited".into()),
        }
    };
    // Behind haq's proxy any free port does (the proxy is re-pointed); without it the
    // gateway knows only the old address.
    let listen = if r.proxy.is_some() {
        "127.0.0.1:0".to_string()
    } else {
        old_url.trim_start_matches("http://").to_string()
    };
    let new = crate::target::sim::start_worker(
        &sim.target,
        &engine,
        &r.name,
        &listen,
        &sim.tools_url,
        &sim.bin,
        &sim.dir,
    )
    .await
    .map_err(|e| format!("{e:#}"))?;
    let (pid, url) = (new.pid, new.url.clone());
    {
        let mut w = shared.lock().await;
        // The replaced process has exited; the new one takes its place (and dies with haq).
        *w = new;
    }
    r.set_direct_url(url.clone());
    if let (Some(p), Some(up)) = (&r.proxy, r.upstream()) {
        p.set_upstream(&up);
    }
    Ok((
        Some(pid),
        format!(
            "sim worker respawned (pid {pid}, {url}, model load {:?})",
            engine.startup.0
        ),
    ))
}

/// How long a drained sim worker may take to finish its in-flight streams.
fn drain_grace(sim: &SimSpawner) -> Duration {
    sim.target.engine.drain_timeout.0 + Duration::from_secs(5)
}

async fn start_command(
    f: &FaultPlan,
    r: &Replica,
    env: &Env,
    cold_start: Option<Duration>,
) -> Result<(Option<u32>, String), String> {
    let cmd = f
        .restart
        .as_ref()
        .and_then(|s| s.command.clone())
        .or_else(|| r.restart_cmd.clone())
        .ok_or("no restart command")?;
    let old_pid = r.process().and_then(|p| super::process::resolve(&p).ok());
    let log = env.run_dir.join(format!("restart-{}.log", r.name));
    let out =
        std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let cx = env.context(None);
    let mut c = tokio::process::Command::new("sh");
    c.arg("-c")
        .arg(&cmd)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .envs(super::command::env(f, r, &cx))
        .env(
            "HAQ_COLD_START_MS",
            cold_start
                .map(|d| d.as_millis().to_string())
                .unwrap_or_default(),
        );
    // SAFETY: restore_in_child is async-signal-safe.
    unsafe {
        c.pre_exec(crate::priority::restore_in_child);
    }
    let mut child = c.spawn().map_err(|e| format!("starting `{cmd}`: {e}"))?;
    let child_pid = child.id();
    // Reap it whenever it ends (a launcher exits at once; a server runs on).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    if let Some(ProcRef::PidFile(path)) = r.process() {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(pid) = super::process::resolve(&ProcRef::PidFile(path.clone()))
                && Some(pid) != old_pid
                && !super::process::gone(pid)
            {
                return Ok((
                    Some(pid),
                    format!("`{cmd}` started; pid file names pid {pid}"),
                ));
            }
            if Instant::now() > deadline || env.load_done.is_cancelled() {
                return Err(format!(
                    "`{cmd}` started but {} never named a new live pid",
                    path.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if let Some(pid) = child_pid {
        let start = super::process::proc_stat(pid).map(|s| s.1);
        r.set_process(ProcRef::Pid { pid, start });
    }
    Ok((
        child_pid,
        format!("`{cmd}` started (pid {})", child_pid.unwrap_or(0)),
    ))
}

async fn poll_ready(r: &Replica, env: &Env, timeout: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(u) = r.direct_url() {
            let url = format!("{u}{}", r.ready_path);
            let got = env
                .admin
                .get(&url)
                .timeout(Duration::from_secs(1))
                .send()
                .await;
            if got.is_ok_and(|x| x.status().is_success()) {
                return Some(start.elapsed());
            }
        }
        if !wait(env, Duration::from_millis(50)).await {
            return None;
        }
    }
    None
}
