//! The replicas a run may fault — exactly the declared ones (the blast-radius guard):
//! each with its process, its proxy, its node, its own address, and how to restart it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};

use crate::proxy::ReplicaProxy;
use crate::scenario::Target;
use crate::target::sim::SharedProcess;

/// A replica's engine process.
#[derive(Clone)]
pub enum ProcRef {
    /// A sim worker haq started (its child: exit status known).
    Sim(SharedProcess),
    /// A declared pid, with its start time (clock ticks since boot) when haq first
    /// saw it, so a reused pid is never signalled.
    Pid { pid: u32, start: Option<u64> },
    /// A pid file, read at each injection (it follows restarts).
    PidFile(PathBuf),
    /// A pod of a kubernetes target (faulted through the API).
    Pod(Arc<crate::target::kube::pod::PodRef>),
}

impl std::fmt::Debug for ProcRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProcRef::Sim(_) => f.write_str("Sim"),
            ProcRef::Pid { pid, .. } => write!(f, "Pid({pid})"),
            ProcRef::PidFile(p) => write!(f, "PidFile({})", p.display()),
            ProcRef::Pod(p) => write!(f, "Pod({})", p.pod.name),
        }
    }
}

/// One declared replica, as the fault backends reach it.
pub struct Replica {
    pub name: String,
    pub node: Option<String>,
    pub process: Mutex<Option<ProcRef>>,
    pub proxy: Option<Arc<ReplicaProxy>>,
    /// `http://host:port` of the replica itself (not through the proxy); changes when
    /// a sim replacement listens elsewhere.
    pub direct_url: RwLock<Option<String>>,
    /// Readiness path on `direct_url`.
    pub ready_path: String,
    /// Shell command that starts a replacement (url targets).
    pub restart_cmd: Option<String>,
}

impl Replica {
    pub fn process(&self) -> Option<ProcRef> {
        self.process
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_process(&self, p: ProcRef) {
        *self.process.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
    }

    pub fn direct_url(&self) -> Option<String> {
        self.direct_url
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_direct_url(&self, url: String) {
        *self.direct_url.write().unwrap_or_else(|e| e.into_inner()) = Some(url);
    }

    /// The pod of a kubernetes replica.
    pub fn pod(&self) -> Option<Arc<crate::target::kube::pod::PodRef>> {
        match self.process() {
            Some(ProcRef::Pod(p)) => Some(p),
            _ => None,
        }
    }

    /// `host:port` of the replica (the proxy's upstream).
    pub fn upstream(&self) -> Option<String> {
        self.direct_url().map(|u| {
            u.trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string()
        })
    }
}

/// How the sim starts a replacement worker.
#[derive(Clone)]
pub struct SimSpawner {
    pub target: Target,
    pub tools_url: String,
    pub bin: PathBuf,
    pub dir: PathBuf,
}

/// How the target starts a replacement replica ([`super::replace`]).
#[derive(Clone)]
pub enum Respawn {
    /// The sim respawns its worker process.
    Sim(Box<SimSpawner>),
    /// The replica's (or the fault's) restart command runs.
    Command,
    /// A kubernetes controller replaces its pods itself.
    Kube,
}

/// Every replica of the target.
pub struct Registry {
    pub replicas: Vec<Arc<Replica>>,
    pub respawn: Respawn,
}

impl Registry {
    /// The declared replica named `name`, or `None`: haq never touches anything else.
    pub fn get(&self, name: &str) -> Option<&Arc<Replica>> {
        self.replicas.iter().find(|r| r.name == name)
    }
}
