//! What validating one fault reads besides the fault: the scenario, the planned
//! phases and the declared replicas, with the lookups the checks share.

use crate::plan::phase::PhasePlan;
use crate::scenario::{ReplicaDecl, Scenario, TargetKind};

pub(super) struct Ctx<'a> {
    pub s: &'a Scenario,
    pub phases: &'a [PhasePlan],
    pub decls: &'a [ReplicaDecl],
}

impl Ctx<'_> {
    pub fn decl(&self, name: &str) -> Option<&ReplicaDecl> {
        self.decls.iter().find(|d| d.name == name)
    }
    pub fn sim(&self) -> bool {
        self.s.target.kind == TargetKind::Sim
    }
    pub fn kube(&self) -> bool {
        self.s.target.kind == TargetKind::Kubernetes
    }
    /// haq's proxy stands in front of the replica (always for the sim).
    pub fn has_proxy(&self, d: &ReplicaDecl) -> bool {
        self.sim() || d.listen.is_some()
    }
    /// The declared replica names, for an error that names an unknown one.
    pub fn names(&self) -> String {
        if self.decls.is_empty() {
            "none: list them under target.replicas".into()
        } else {
            self.decls
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}
