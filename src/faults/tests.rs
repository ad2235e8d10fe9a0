//! Backends against real processes and a real proxy path; the heal guard through a
//! panic.

use std::sync::{Mutex, RwLock};
use std::time::Duration;

use super::*;
use crate::plan::{FaultPlan, Trigger};
use crate::scenario::{CommandSpec, FailureDomain, FaultAction, FaultBackend};
use crate::target::procs;
use crate::target::registry::ProcRef;
use crate::trace::{Event, TraceWriter};

/// A child process to fault (`sleep`), killed when dropped.
struct Victim(std::process::Child);

impl Victim {
    fn start() -> Victim {
        Victim(
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .expect("sleep"),
        )
    }
    fn pid(&self) -> u32 {
        self.0.id()
    }
    fn proc_ref(&self) -> ProcRef {
        ProcRef::Pid {
            pid: self.pid(),
            start: procs::proc_stat(self.pid()).map(|s| s.1),
        }
    }
}

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn replica(name: &str, p: Option<ProcRef>) -> Replica {
    Replica {
        name: name.into(),
        node: None,
        process: Mutex::new(p),
        proxy: None,
        direct_url: RwLock::new(None),
        ready_path: "/health".into(),
        restart_cmd: None,
    }
}

fn plan(action: FaultAction) -> FaultPlan {
    FaultPlan {
        name: format!("{}-t", action.as_str()),
        domain: FailureDomain::Worker,
        backend: action.backend(),
        action,
        replica: "w1".into(),
        replicas: vec!["w1".into()],
        node: None,
        phase: "fault".into(),
        at: Duration::ZERO,
        trigger: Trigger::Time,
        duration: None,
        delay: None,
        bytes_per_s: None,
        factor: None,
        health: None,
        gpu: None,
        restart: None,
        command: None,
        exec: None,
        reset_connections: None,
        grace: None,
        verify: true,
    }
}

pub(super) fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("haq-faults-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

pub(super) fn context(dir: &std::path::Path) -> Context {
    Context {
        run_dir: dir.to_path_buf(),
        seed: 7,
        clock: crate::trace::Clock::start(),
        trace: TraceWriter::sink(),
        probe: None,
        http: admin_client().expect("client"),
        stop: tokio_util::sync::CancellationToken::new(),
        ledger: std::sync::Arc::new(super::ledger::Ledger::none()),
    }
}

#[tokio::test]
async fn freeze_is_verified_by_the_kernel_and_resumed() {
    let v = Victim::start();
    let r = replica("w1", Some(v.proc_ref()));
    let dir = scratch("freeze");
    let (inj, undo) = injector(FaultBackend::Process)
        .inject(&plan(FaultAction::Freeze), &r, &context(&dir))
        .await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(procs::stopped(v.pid()));
    let h = undo.expect("freeze is reversible").undo();
    assert!(h.verified, "{}", h.detail);
    assert!(!procs::stopped(v.pid()));
}

#[tokio::test]
async fn kill_of_a_declared_pid_and_of_a_pid_file() {
    let dir = scratch("kill");
    for via_file in [false, true] {
        let v = Victim::start();
        let p = if via_file {
            let f = dir.join("w1.pid");
            std::fs::write(&f, format!("{}\n", v.pid())).expect("pid file");
            ProcRef::PidFile(f)
        } else {
            v.proc_ref()
        };
        let r = replica("w1", Some(p));
        let (inj, undo) = injector(FaultBackend::Process)
            .inject(&plan(FaultAction::Kill), &r, &context(&dir))
            .await;
        assert!(inj.verified, "{}", inj.detail);
        assert_eq!(inj.pid, Some(v.pid()));
        assert!(undo.is_none());
        assert!(procs::gone(v.pid()));
        // A second kill finds nothing to kill: not verified, never a silent pass.
        let (again, _) = injector(FaultBackend::Process)
            .inject(&plan(FaultAction::Kill), &r, &context(&dir))
            .await;
        assert!(!again.verified, "{}", again.detail);
    }
}

#[tokio::test]
async fn a_reused_pid_is_never_signalled() {
    let v = Victim::start();
    let r = replica(
        "w1",
        Some(ProcRef::Pid {
            pid: v.pid(),
            start: Some(1),
        }),
    );
    let (inj, _) = injector(FaultBackend::Process)
        .inject(&plan(FaultAction::Kill), &r, &context(&scratch("reuse")))
        .await;
    assert!(!inj.verified);
    assert!(inj.detail.contains("another process"), "{}", inj.detail);
    assert!(!procs::gone(v.pid()), "it was signalled");
    for pid in [1, std::process::id()] {
        assert!(procs::resolve(&ProcRef::Pid { pid, start: None }).is_err());
    }
}

#[tokio::test]
async fn command_backend_runs_with_context_verifies_and_heals() {
    let dir = scratch("cmd");
    let mut f = plan(FaultAction::Command);
    f.command = Some(CommandSpec {
        inject: "echo \"$HAQ_FAULT $HAQ_REPLICA $HAQ_SEED $HAQ_DOMAIN\" > \"$HAQ_RUN_DIR/flag\""
            .into(),
        verify: Some("cat \"$HAQ_RUN_DIR/flag\"".into()),
        heal: Some("rm \"$HAQ_RUN_DIR/flag\"".into()),
        timeout: crate::wire::units::Dur::secs(5),
    });
    let r = replica("w1", None);
    let (inj, undo) = injector(FaultBackend::Command)
        .inject(&f, &r, &context(&dir))
        .await;
    assert!(inj.verified, "{}", inj.detail);
    assert!(
        inj.detail.contains("command-t w1 7 worker"),
        "{}",
        inj.detail
    );
    let h = undo.expect("heal").undo();
    assert!(h.verified, "{}", h.detail);
    assert!(!dir.join("flag").exists());

    // A verify command that fails: the fault is recorded as not taken effect.
    let mut bad = f.clone();
    if let Some(c) = &mut bad.command {
        c.verify = Some("exit 3".into());
    }
    let (inj, _) = injector(FaultBackend::Command)
        .inject(&bad, &r, &context(&dir))
        .await;
    assert!(!inj.verified);
    assert!(inj.detail.contains("verify exit 3"), "{}", inj.detail);

    // A command that hangs is killed at its timeout.
    let t = std::time::Instant::now();
    let ran = command::run_sh("sleep 30", &[], Duration::from_millis(300), None);
    assert!(!ran.ok && ran.status.contains("timed out"), "{ran:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
}

/// A descendant that leaves the command's process group (`setsid … &`) and keeps its
/// pipes open cannot hold haq past the command (issue 15): the command's own end (or
/// its timeout) ends the wait, with the output read so far; an interrupt ends it too.
#[test]
fn a_setsid_child_cannot_hold_a_command_past_its_end_or_its_timeout() {
    let dir = std::env::temp_dir().join(format!("haq-setsid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let pidfile = dir.join("escaped.pid");
    // The escaped child writes its pid, then lives 20 s holding stdout and stderr.
    let escape = format!(
        "setsid sh -c 'echo $$ > {p}; exec sleep 20' & echo injected",
        p = pidfile.display()
    );
    let kill_escaped = || {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = std::fs::remove_file(&pidfile);
    };
    let t = std::time::Instant::now();
    let ran = command::run_sh(&escape, &[], Duration::from_secs(10), None);
    assert!(ran.ok, "{ran:?}");
    assert!(ran.output.contains("injected"), "{ran:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held {:?}",
        t.elapsed()
    );
    kill_escaped();
    // Past its timeout: the group is killed and the escaped child is not waited for.
    let t = std::time::Instant::now();
    let hang = format!("{escape}; sleep 30");
    let ran = command::run_sh(&hang, &[], Duration::from_millis(500), None);
    assert!(!ran.ok && ran.status.contains("timed out"), "{ran:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held {:?}",
        t.elapsed()
    );
    kill_escaped();
    // An interrupt ends a long command at once.
    let stop = tokio_util::sync::CancellationToken::new();
    let s2 = stop.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        s2.cancel();
    });
    let t = std::time::Instant::now();
    let ran = command::run_sh("sleep 30", &[], Duration::from_secs(600), Some(&stop));
    assert!(!ran.ok && ran.status.contains("interrupted"), "{ran:?}");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "held {:?}",
        t.elapsed()
    );
    let _ = canceller.join();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The guard heals what is still applied when a panic unwinds through its owner: the
/// frozen process runs again, the blackholed path forwards again, and the trace says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heal_guard_heals_during_a_panic() {
    let dir = scratch("panic");
    let trace = dir.join("trace.jsonl");
    let (tw, th) = TraceWriter::create(&trace).expect("trace");
    let clock = crate::trace::Clock::start();
    let v = Victim::start();
    let pid = v.pid();
    let proxies = crate::proxy::ProxySet::start(
        &[crate::proxy::ProxySpec {
            name: "w2".into(),
            listen: "127.0.0.1:0".parse().expect("addr"),
            upstream: Some("127.0.0.1:9".into()),
        }],
        &tw,
        &clock,
    )
    .await
    .expect("proxy");
    let path = proxies.replicas[0].clone();
    let mut w2 = replica("w2", None);
    w2.proxy = Some(path.clone());
    let w1 = replica("w1", Some(v.proc_ref()));
    let cx = Context {
        trace: tw.clone(),
        clock,
        ..context(&dir)
    };
    let task = tokio::spawn(async move {
        let guard = HealGuard::new(cx.trace.clone(), cx.clock);
        let (a, ua) = injector(FaultBackend::Process)
            .inject(&plan(FaultAction::Freeze), &w1, &cx)
            .await;
        let (b, ub) = injector(FaultBackend::Proxy)
            .inject(&plan(FaultAction::Blackhole), &w2, &cx)
            .await;
        assert!(a.verified && b.verified, "{} / {}", a.detail, b.detail);
        guard.heals().register("freeze-t", "w1", ua.expect("undo"));
        guard
            .heals()
            .register("blackhole-t", "w2", ub.expect("undo"));
        assert!(procs::stopped(pid));
        panic!("a bug in the middle of a run");
    });
    let r = task.await;
    assert!(r.is_err_and(|e| e.is_panic()));
    assert!(!procs::stopped(pid), "the frozen process was left frozen");
    assert!(!path.rules().blackhole, "the path was left cut");
    drop(tw);
    drop(proxies);
    th.finish().expect("trace");
    let heals: Vec<_> = crate::trace::read(&trace)
        .expect("read")
        .map_while(Result::ok)
        .filter_map(|e| match e {
            Event::Heal {
                name,
                detail,
                verified,
                ..
            } => Some((name, detail, verified)),
            _ => None,
        })
        .collect();
    assert_eq!(heals.len(), 2, "{heals:?}");
    for (name, detail, verified) in heals {
        assert!(detail.contains("unwinding a panic"), "{name}: {detail}");
        assert_eq!(verified, Some(true), "{name}: {detail}");
    }
}
