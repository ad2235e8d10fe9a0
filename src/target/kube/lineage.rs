//! Which replica a pod is (the attribution both observers share): a replica's own
//! pod, a pod that was its own (a retired pod's last changes are still its
//! replica's: the old pod leaving the endpoints is the replica's detection), and a
//! new pod its controller made for it. A replica whose pod is gone or terminating is
//! vacant; the first new live pod of the same controller (the `controller: true`
//! owner reference: the ReplicaSet, the StatefulSet — any selected pod when the old
//! one had none; observers give only pods they checked against the selector) fills
//! the lowest vacant replica, and the registry's pod and direct
//! URL become the new pod's, so later faults hit it, haq's proxy in front of the
//! replica (if any) forwards to it, and the response attribution learns its address
//! (a gateway naming the new pod names the replica: its first request served). A StatefulSet's pod comes back
//! under the same name with a new uid: that is a new pod too.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::pod::{Owner, PodInfo, PodRef};
use crate::client::Learned;
use crate::target::registry::{ProcRef, Registry, Replica};

/// A pod an observer saw, as far as it knows it.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    pub name: String,
    pub uid: String,
    /// Empty until known (a new pod has no IP, the slice no owner).
    pub ip: String,
    pub node: String,
    pub owner: Option<Owner>,
}

/// A new pod took a vacant replica's place.
#[derive(Debug, Clone, PartialEq)]
pub struct Adopted {
    pub replica: usize,
    /// The replica's pod before.
    pub old: String,
}

/// The attribution of pods to replicas.
pub struct Lineage {
    registry: Arc<Registry>,
    /// Every pod that was a replica's (current or retired): name → replica index.
    pods: BTreeMap<String, usize>,
    /// Replicas whose pod is gone or terminating.
    vacant: BTreeSet<usize>,
    /// Uids of the pods that replaced a replica's.
    replacements: BTreeSet<String>,
    /// Uids of the pods that left a replica (never adopted again).
    retired: BTreeSet<String>,
    /// Where a replica's new address is told (the response attribution).
    learned: Option<Arc<Learned>>,
}

/// The lineage both observers of a run share.
pub type Shared = Arc<Mutex<Lineage>>;

impl Lineage {
    pub fn new(registry: Arc<Registry>) -> Lineage {
        let pods = registry
            .replicas
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.pod().map(|p| (p.pod.name.clone(), i)))
            .collect();
        Lineage {
            registry,
            pods,
            vacant: BTreeSet::new(),
            replacements: BTreeSet::new(),
            retired: BTreeSet::new(),
            learned: None,
        }
    }

    pub fn shared(registry: Arc<Registry>) -> Shared {
        Arc::new(Mutex::new(Lineage::new(registry)))
    }

    /// Shared, telling `learned` each replica's new pod address (a replacement's).
    pub fn learning(registry: Arc<Registry>, learned: Arc<Learned>) -> Shared {
        let mut l = Lineage::new(registry);
        l.learned = Some(learned);
        Arc::new(Mutex::new(l))
    }

    /// The replica's name.
    pub fn name(&self, i: usize) -> String {
        self.registry.replicas[i].name.clone()
    }

    /// The replica whose pod this is now (a known uid must match: a StatefulSet's pod
    /// under the same name and a new uid is not the old pod).
    pub fn current(&self, pod: &str, uid: &str) -> Option<usize> {
        self.registry.replicas.iter().position(|r| {
            r.pod()
                .is_some_and(|p| p.pod.name == pod && (uid.is_empty() || p.pod.uid == uid))
        })
    }

    /// The replica this pod is or was.
    pub fn replica_of(&self, pod: &str) -> Option<usize> {
        self.pods.get(pod).copied()
    }

    /// The pod replaced one of a replica's (not one discovered at the start).
    pub fn is_replacement(&self, uid: &str) -> bool {
        self.replacements.contains(uid)
    }

    /// Some replica's pod is gone or terminating (a new pod may take its place).
    pub fn has_vacant(&self) -> bool {
        !self.vacant.is_empty()
    }

    /// The replica's pod is gone or terminating.
    pub fn vacate(&mut self, i: usize) {
        if let Some(p) = self.registry.replicas[i].pod() {
            self.retired.insert(p.pod.uid.clone());
        }
        self.vacant.insert(i);
    }

    /// A new live pod fills the lowest vacant replica of its controller.
    pub fn adopt(&mut self, s: &Seen) -> Option<Adopted> {
        if self.current(&s.name, &s.uid).is_some()
            || self.replacements.contains(&s.uid)
            || self.retired.contains(&s.uid)
        {
            return None;
        }
        let i = *self.vacant.iter().find(|&&i| {
            let old = self.registry.replicas[i].pod();
            old.is_some_and(|o| match (&o.pod.owner, &s.owner) {
                (Some(a), Some(b)) => a.uid == b.uid,
                // A controller's pod is replaced by that controller's pods only.
                (Some(_), None) => false,
                // A bare pod: by any selected pod.
                (None, _) => true,
            })
        })?;
        let r = &self.registry.replicas[i];
        let old = r.pod()?;
        let mut pod = old.pod.clone();
        pod.name.clone_from(&s.name);
        pod.uid.clone_from(&s.uid);
        pod.ip.clone_from(&s.ip);
        pod.node.clone_from(&s.node);
        pod.restarts = 0;
        if s.owner.is_some() {
            pod.owner.clone_from(&s.owner);
        }
        self.follow(r, &pod);
        r.set_process(ProcRef::Pod(Arc::new(PodRef {
            cluster: old.cluster.clone(),
            pod,
        })));
        self.vacant.remove(&i);
        self.pods.insert(s.name.clone(), i);
        self.replacements.insert(s.uid.clone());
        Some(Adopted {
            replica: i,
            old: old.pod.name.clone(),
        })
    }

    /// What is now known of replica `i`'s pod (its IP and node once scheduled): the
    /// registry's pod and direct URL follow.
    pub fn update(&self, i: usize, s: &Seen) {
        let r = &self.registry.replicas[i];
        let Some(old) = r.pod() else { return };
        let ip = if s.ip.is_empty() { &old.pod.ip } else { &s.ip };
        let node = if s.node.is_empty() {
            &old.pod.node
        } else {
            &s.node
        };
        if (ip, node) == (&old.pod.ip, &old.pod.node) {
            return;
        }
        let mut pod = old.pod.clone();
        pod.ip.clone_from(ip);
        pod.node.clone_from(node);
        self.follow(r, &pod);
        r.set_process(ProcRef::Pod(Arc::new(PodRef {
            cluster: old.cluster.clone(),
            pod,
        })));
    }
}

impl Lineage {
    /// The replica's direct URL and haq's proxy in front of it (its new connections)
    /// go to the pod's address, once it has one, and the response attribution learns
    /// that the address is the replica's.
    fn follow(&self, r: &Replica, pod: &PodInfo) {
        if pod.ip.is_empty() {
            return;
        }
        r.set_direct_url(pod.url());
        if let Some(p) = &r.proxy {
            p.set_upstream(&pod.authority());
        }
        if let Some(l) = &self.learned {
            l.learn(&r.name, &pod.authority());
        }
    }
}
