//! The workload a replica's pod belongs to and the scale-down a fault made of it
//! (`replacement: scale`): plain data, shared by the cluster (which keeps the
//! scale-downs) and `scale` (which makes and undoes them).

/// A Deployment or a StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// `deployments` or `statefulsets`.
    pub plural: &'static str,
    pub name: String,
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.plural, self.name)
    }
}

/// A scale-down a fault made: the workload and the count it had.
#[derive(Debug, Clone)]
pub struct Scaled {
    pub workload: Workload,
    pub original: i32,
    /// The uid of the pod the scale-down removed.
    pub pod_uid: String,
}
