//! Starting a replacement replica (Q6, Q11), as the target does it: the sim respawns
//! its worker with the scenario's cold-start delay; a `url` replica's restart command
//! runs. [`ready_within`] follows the new replica to readiness. The stages are
//! recorded by the fault that asked for the replacement (`faults::replace`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::registry::{ProcRef, Replica, Respawn, SimSpawner};

/// What a replacement is started with.
pub struct Restart {
    /// The restart command (`url` targets): the fault's own, else the replica's.
    pub command: Option<String>,
    /// Model load time of the replacement (the sim's cold start; `HAQ_COLD_START_MS`
    /// for a command).
    pub cold_start: Option<Duration>,
    /// Environment of the restart command (`HAQ_FAULT`, `HAQ_REPLICA`, …).
    pub env: Vec<(String, String)>,
    /// Where the restart command's output goes (in the run directory).
    pub log: PathBuf,
    /// The load ended: stop waiting.
    pub stop: CancellationToken,
}

/// Starts a replacement for `r` the target's way; the new pid (when known) and what
/// was done.
pub async fn start(
    r: &Replica,
    respawn: &Respawn,
    how: &Restart,
) -> Result<(Option<u32>, String), String> {
    match respawn {
        Respawn::Sim(sim) => start_sim(r, sim, how).await,
        Respawn::Command => start_command(r, how).await,
        // `replacement: scale`: the workload scaled back up (its controller makes the pod).
        Respawn::Kube => crate::target::kube::scale::respawn(r).await,
    }
}

async fn start_sim(
    r: &Replica,
    sim: &SimSpawner,
    how: &Restart,
) -> Result<(Option<u32>, String), String> {
    let (cold_start, stop) = (how.cold_start, &how.stop);
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

async fn start_command(r: &Replica, how: &Restart) -> Result<(Option<u32>, String), String> {
    let cmd = how.command.clone().ok_or("no restart command")?;
    let old_pid = r
        .process()
        .and_then(|p| crate::target::procs::resolve(&p).ok());
    let log = &how.log;
    let out = std::fs::File::create(log).map_err(|e| format!("creating {}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    if super::group::abandoned() {
        return Err("not started: haq was told to end at once".into());
    }
    let mut c = super::group::sh(&cmd);
    c.stdout(out).stderr(err).envs(how.env.iter().cloned()).env(
        "HAQ_COLD_START_MS",
        how.cold_start
            .map(|d| d.as_millis().to_string())
            .unwrap_or_default(),
    );
    let mut child = tokio::process::Command::from(c)
        .spawn()
        .map_err(|e| format!("starting `{cmd}`: {e}"))?;
    let child_pid = child.id();
    // It leads a process group of its own, so a Ctrl-C at haq's terminal does not reach
    // it, and it is left running when the run ends: the replacement is what brings the
    // killed replica back, and the cluster should be whole after the run, as before it.
    // Reap it whenever it ends (a launcher exits at once; a server runs on).
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    if let Some(ProcRef::PidFile(path)) = r.process() {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(pid) = crate::target::procs::resolve(&ProcRef::PidFile(path.clone()))
                && Some(pid) != old_pid
                && !crate::target::procs::gone(pid)
            {
                return Ok((
                    Some(pid),
                    format!("`{cmd}` started; pid file names pid {pid}"),
                ));
            }
            if Instant::now() > deadline || how.stop.is_cancelled() {
                return Err(format!(
                    "`{cmd}` started but {} never named a new live pid",
                    path.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    if let Some(pid) = child_pid {
        let start = crate::target::procs::proc_stat(pid).map(|s| s.1);
        r.set_process(ProcRef::Pid { pid, start });
    }
    Ok((
        child_pid,
        format!("`{cmd}` started (pid {})", child_pid.unwrap_or(0)),
    ))
}

/// Polls the replica's readiness path (directly, not through the gateway) until it
/// answers 2xx; `None` when `timeout` passes or `stop` comes first.
pub async fn ready_within(
    r: &Replica,
    http: &reqwest::Client,
    timeout: Duration,
    stop: &CancellationToken,
) -> Option<Duration> {
    if r.pod().is_some() {
        // A pod: its Ready condition, from the API (pod IPs are often unreachable).
        return crate::target::kube::scale::ready(r, timeout, stop).await;
    }
    let start = Instant::now();
    while start.elapsed() < timeout {
        if let Some(u) = r.direct_url() {
            let url = format!("{u}{}", r.ready_path);
            let got = http.get(&url).timeout(Duration::from_secs(1)).send().await;
            if got.is_ok_and(|x| x.status().is_success()) {
                return Some(start.elapsed());
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = stop.cancelled() => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::group;

    /// A restart command whose server runs on in the background (`&`, no `setsid`)
    /// leads a process group of its own — a Ctrl-C at haq's terminal reaches neither —
    /// that haq does not end with its processes: the replacement outlives the run, as
    /// the replica it replaces would have.
    #[tokio::test]
    async fn a_restart_command_leads_its_own_group_and_is_left_running() {
        let dir = std::env::temp_dir().join(format!("haq-restart-group-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let r = Replica {
            name: "a".into(),
            node: None,
            process: std::sync::Mutex::new(None),
            proxy: None,
            direct_url: std::sync::RwLock::new(None),
            ready_path: "/ready".into(),
            restart_cmd: None,
        };
        let how = Restart {
            command: Some("sh -c 'sleep 300 & sleep 300'".into()),
            cold_start: None,
            env: Vec::new(),
            log: dir.join("restart-a.log"),
            stop: CancellationToken::new(),
        };
        let (pid, _) = start(&r, &Respawn::Command, &how).await.expect("started");
        let pgid = pid.expect("pid") as i32;
        // SAFETY: getpgrp has no preconditions.
        assert_ne!(pgid, unsafe { libc::getpgrp() }, "not in haq's group");
        let sleeps = || {
            group::members(pgid)
                .into_iter()
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "sleep")
                })
                .count()
        };
        let t0 = Instant::now();
        while sleeps() < 2 && t0.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(sleeps(), 2, "{:?}", group::members(pgid));
        // Not among the groups haq ends when it ends.
        assert!(!group::known(pgid));
        // SAFETY: killpg on the group this test started.
        unsafe { libc::killpg(pgid, libc::SIGKILL) };
        let _ = std::fs::remove_dir_all(&dir);
    }
}
