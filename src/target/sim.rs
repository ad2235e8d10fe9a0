//! Starts and stops the sim's processes. Every child is in its own process group (a
//! Ctrl-C at the terminal reaches haq only, which then stops them in order) and dies
//! with haq (PR_SET_PDEATHSIG), so no worker outlives a crashed run.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use std::sync::Arc;

use anyhow::{Context, anyhow, bail};
use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::Mutex;

use crate::scenario::Target;
use crate::trace::ReplicaInfo;
use crate::wire::LISTEN_PREFIX;

/// One running sim process.
pub struct SimProcess {
    pub name: String,
    /// Base URL, e.g. `http://127.0.0.1:41234`.
    pub url: String,
    pub pid: u32,
    child: Child,
}

impl SimProcess {
    pub fn signal(&self, sig: Signal) -> nix::Result<()> {
        nix::sys::signal::kill(Pid::from_raw(self.pid as i32), sig)
    }

    /// Waits for the process to exit; `None` if it is still alive after `timeout`.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .ok()?
            .ok()
    }

    /// The process has exited (reaps it if so).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILLs (after resuming a frozen process) and reaps it.
    pub async fn kill_and_reap(&mut self) {
        if self.exited().is_none() {
            let _ = self.signal(Signal::SIGCONT);
            let _ = self.child.start_kill();
            let _ = self.wait_exit(Duration::from_secs(5)).await;
        }
    }
}

/// A worker process shared between the run loop and fault tasks.
pub type SharedProcess = Arc<Mutex<SimProcess>>;

/// The running sim: workers `w1..wN`, the gateway in front of them and the tool
/// service they call.
pub struct SimCluster {
    pub workers: Vec<SharedProcess>,
    /// Name, URL and pid of each worker (readable without locking).
    pub info: Vec<ReplicaInfo>,
    pub gateway: SimProcess,
    pub tools: SimProcess,
    /// `http://127.0.0.1:PORT/v1`
    pub api_url: String,
    /// The scenario target it was started from.
    pub target: Target,
    bin: PathBuf,
    dir: PathBuf,
}

/// Arguments of `haq sim worker` for replica `name` listening on `listen`.
fn worker_args(
    target: &Target,
    engine: &crate::scenario::EngineCfg,
    name: &str,
    listen: &str,
    tools_url: &str,
    dir: &Path,
) -> anyhow::Result<Vec<String>> {
    Ok(vec![
        "sim".into(),
        "worker".into(),
        "--name".into(),
        name.into(),
        "--listen".into(),
        listen.into(),
        "--model".into(),
        target.model.clone(),
        "--engine".into(),
        serde_json::to_string(engine)?,
        "--tools-url".into(),
        tools_url.into(),
        "--journal".into(),
        dir.join(crate::trace::files::worker_file(name))
            .display()
            .to_string(),
    ])
}

/// Starts sim worker `name` listening on `listen` (`127.0.0.1:0` for any port; its old
/// address for a replacement the gateway reaches where it always did).
pub async fn start_worker(
    target: &Target,
    engine: &crate::scenario::EngineCfg,
    name: &str,
    listen: &str,
    tools_url: &str,
    bin: &Path,
    dir: &Path,
) -> anyhow::Result<SimProcess> {
    let args = worker_args(target, engine, name, listen, tools_url, dir)?;
    spawn(bin, name, &args, dir).await
}

impl SimProcess {
    /// Starts `bin ARGS` as sim process `name` (log in `dir/sim-<name>.log`) and waits
    /// for the address it announces.
    pub async fn start(
        bin: &Path,
        name: &str,
        args: &[String],
        dir: &Path,
    ) -> anyhow::Result<SimProcess> {
        spawn(bin, name, args, dir).await
    }
}

async fn spawn(bin: &Path, name: &str, args: &[String], dir: &Path) -> anyhow::Result<SimProcess> {
    let log = dir.join(format!("sim-{name}.log"));
    // Appends: a replacement worker keeps its predecessor's log.
    let log_file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true);
    // SAFETY: setsid, prctl and setpriority are async-signal-safe and touch no memory of
    // the parent.
    unsafe {
        cmd.pre_exec(|| {
            // Its own session, hence its own process group (a terminal's Ctrl-C reaches
            // haq, which stops the sim in order) and, where the kernel groups CPU time
            // by session (autogroup), its own CPU share: a busy sim never delays haq's
            // dispatcher, whose timing is the evidence (crate::priority).
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            crate::priority::restore_in_child()
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {} for sim {name}", bin.display()))?;
    let pid = child
        .id()
        .ok_or_else(|| anyhow!("sim {name} exited at once"))?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no stdout from sim {name}"))?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
    let addr = match first {
        Ok(Ok(Some(l))) if l.starts_with(LISTEN_PREFIX) => {
            l[LISTEN_PREFIX.len()..].trim().to_string()
        }
        other => {
            let _ = child.start_kill();
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: String = tail.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
            bail!("sim {name} did not start ({other:?}); its log says: {tail}");
        }
    };
    // Keep draining stdout so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok(SimProcess {
        name: name.into(),
        url: format!("http://{addr}"),
        pid,
        child,
    })
}

impl SimCluster {
    /// Starts `target.replicas` workers and the gateway; returns once the gateway
    /// routes to every worker.
    pub async fn start(target: &Target, bin: &Path, dir: &Path) -> anyhow::Result<SimCluster> {
        Self::start_via(target, bin, dir, &|_, url| url.to_string()).await
    }

    /// As [`start`](Self::start), with the gateway reaching worker `name` (at `url`)
    /// through the URL `via(name, url)` returns (haq's proxy in between).
    pub async fn start_via(
        target: &Target,
        bin: &Path,
        dir: &Path,
        via: &(dyn Fn(&str, &str) -> String + Sync),
    ) -> anyhow::Result<SimCluster> {
        Self::start_on(target, bin, dir, via, "127.0.0.1:0").await
    }

    /// As [`start_via`](Self::start_via), the gateway listening on `gateway_listen`
    /// (`haq sim up --port`).
    pub async fn start_on(
        target: &Target,
        bin: &Path,
        dir: &Path,
        via: &(dyn Fn(&str, &str) -> String + Sync),
        gateway_listen: &str,
    ) -> anyhow::Result<SimCluster> {
        let tools_args = vec![
            "sim".to_string(),
            "tools".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--log".into(),
            dir.join(crate::trace::files::TOOLS_FILE)
                .display()
                .to_string(),
            "--config".into(),
            serde_json::to_string(&target.tools)?,
        ];
        let tools = spawn(bin, "tools", &tools_args, dir).await?;
        let mut workers = Vec::new();
        for name in target.replica_names() {
            let w = start_worker(
                target,
                &target.engine,
                &name,
                "127.0.0.1:0",
                &tools.url,
                bin,
                dir,
            );
            workers.push(w.await?);
        }
        let mut args = vec![
            "sim".to_string(),
            "gateway".into(),
            "--listen".into(),
            gateway_listen.into(),
            "--config".into(),
            serde_json::to_string(&target.gateway)?,
            "--journal".into(),
            dir.join(crate::trace::files::GATEWAY_FILE)
                .display()
                .to_string(),
        ];
        for w in &workers {
            args.push("--upstream".into());
            args.push(format!("{}={}", w.name, via(&w.name, &w.url)));
        }
        let gateway = spawn(bin, "gateway", &args, dir).await?;
        let cluster = SimCluster {
            api_url: format!("{}/v1", gateway.url),
            info: workers
                .iter()
                .map(|w| ReplicaInfo {
                    name: w.name.clone(),
                    url: w.url.clone(),
                    pid: Some(w.pid),
                    proxy: None,
                    node: None,
                })
                .collect(),
            workers: workers
                .into_iter()
                .map(|w| Arc::new(Mutex::new(w)))
                .collect(),
            gateway,
            tools,
            target: target.clone(),
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
        };
        let wait = target.engine.startup.0 + Duration::from_secs(30);
        cluster.wait_all_ready(wait).await?;
        Ok(cluster)
    }

    /// Starts a new process for replica `name` on its old address (the gateway keeps its
    /// upstream list) with `engine` — `target.engine.for_replacement()` for a cold
    /// replacement. The caller swaps it into `workers` once the old one is gone.
    pub async fn spawn_worker(
        &self,
        name: &str,
        engine: &crate::scenario::EngineCfg,
    ) -> anyhow::Result<SimProcess> {
        let i = self
            .info
            .iter()
            .position(|r| r.name == name)
            .ok_or_else(|| anyhow!("no sim worker {name}"))?;
        let listen = self.info[i].url.trim_start_matches("http://").to_string();
        let (target, tools) = (&self.target, &self.tools.url);
        start_worker(target, engine, name, &listen, tools, &self.bin, &self.dir).await
    }

    /// The tool service's base URL.
    pub fn tools_url(&self) -> &str {
        &self.tools.url
    }

    /// Polls every worker's `/ready` and the gateway until it routes to every worker.
    pub async fn wait_all_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        crate::wire::tls::install_crypto_provider();
        let http = reqwest::Client::builder().no_proxy().build()?;
        let url = format!("{}/haq/status", self.gateway.url);
        let deadline = Instant::now() + timeout;
        for w in &self.info {
            loop {
                let ok = http
                    .get(format!("{}/ready", w.url))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success());
                if ok {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("sim worker {} not ready after {timeout:?}", w.name);
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        loop {
            let status: Option<serde_json::Value> = match http.get(&url).send().await {
                Ok(r) => r.json().await.ok(),
                Err(_) => None,
            };
            let ready = status
                .as_ref()
                .and_then(|s| s["upstreams"].as_array().cloned())
                .map(|ups| ups.iter().filter(|u| u["ready"] == true).count())
                .unwrap_or(0);
            if ready == self.workers.len() {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "the sim gateway routes to {ready} of {} workers after {timeout:?}",
                    self.workers.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The worker named `name`.
    pub fn worker(&self, name: &str) -> Option<SharedProcess> {
        let i = self.info.iter().position(|r| r.name == name)?;
        self.workers.get(i).cloned()
    }

    /// Stops every process (resuming frozen ones first) and reaps them.
    pub async fn stop(mut self) {
        self.gateway.kill_and_reap().await;
        for w in &self.workers {
            w.lock().await.kill_and_reap().await;
        }
        self.tools.kill_and_reap().await;
    }
}

/// The haq executable that sim processes are started from: `$HAQ_BIN`, else this
/// process's own executable.
pub fn haq_binary() -> std::io::Result<PathBuf> {
    match std::env::var_os("HAQ_BIN") {
        Some(p) => Ok(PathBuf::from(p)),
        None => std::env::current_exe(),
    }
}
