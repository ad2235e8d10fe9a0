//! The agents of `haq run --agents N` as a Kubernetes Indexed Job (`agents.kubernetes`,
//! docs/agents.md): the Job's spec, the calls that create it, read its pods, copy their
//! logs and delete it, and what the coordinator reads of each agent pod. One pod per
//! share: the Job controller sets `JOB_COMPLETION_INDEX` in pod K, which `haq agent`
//! takes as its share; no retry (`backoffLimit: 0`): a retried share would be sent twice.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams, PropagationPolicy};
use kube::core::Request;

use super::calls::{Call, RUN_LABEL, dns_name};
use super::dryrun::Step;
use crate::plan::Plan;
use crate::scenario::KubeAgents;

/// The label that tells the agent pods from anything else of the run.
pub const ROLE_LABEL: &str = "haq.dev/role";
pub const ROLE: &str = "agent";
/// The agent's container in its pod.
pub const CONTAINER: &str = "agent";
/// The annotation the Job controller puts on each pod of an Indexed Job.
pub const INDEX_ANNOTATION: &str = "batch.kubernetes.io/job-completion-index";
/// The environment variable carrying the key the coordinator's endpoint asks for.
pub const KEY_ENV: &str = "HAQ_AGENT_KEY";
/// How long a finished Job stays (its pods' logs readable) if haq could not delete it.
const TTL_AFTER_FINISHED_S: i64 = 600;
/// The most of an agent's log haq copies into the run directory.
pub const LOG_LIMIT: i64 = 1 << 20;

/// How long past the run's planned end (the start deadline, the phases, the drain)
/// the Job may live: time for the agents to send their traces.
const JOB_GRACE_S: u64 = 120;

/// The Job's `activeDeadlineSeconds`: Kubernetes stops the agents after it even if
/// haq is gone.
pub fn deadline_s(plan: &Plan, cfg: &KubeAgents) -> u64 {
    (cfg.start_within.0 + plan.total + plan.scenario.client.drain_timeout.0).as_secs() + JOB_GRACE_S
}

/// The Job of run `token`.
pub fn job_name(token: &str) -> String {
    dns_name(&format!("haq-agents-{token}"))
}

/// What the agents' Job is made of.
pub struct AgentJob<'a> {
    pub token: &'a str,
    pub count: u64,
    pub cfg: &'a KubeAgents,
    /// `agent <scenario> --set … --seed N --coordinator URL` ([`agent_args`]).
    pub args: Vec<String>,
    /// The key of the coordinator's endpoint.
    pub key: &'a str,
    /// The Job's `activeDeadlineSeconds`: the whole run and its grace.
    pub deadline_s: u64,
}

/// The command line of each agent pod (after the image's entrypoint, `haq`).
pub fn agent_args(
    cfg: &KubeAgents,
    scenario_file: &str,
    sets: &[String],
    seed: u64,
    coordinator: &str,
) -> Vec<String> {
    let dir = cfg.scenario_dir.trim_end_matches('/');
    let mut v = vec!["agent".to_string(), format!("{dir}/{scenario_file}")];
    for s in sets {
        v.push("--set".into());
        v.push(s.clone());
    }
    v.extend([
        "--seed".into(),
        seed.to_string(),
        "--coordinator".into(),
        coordinator.to_string(),
    ]);
    v
}

/// The Indexed Job: `completions` = `parallelism` = N, no retry, spread over nodes
/// (one node's NICs are what agents are for), no service account token (agents make
/// no API call), the scenario's ConfigMap mounted read-only, `/tmp` an emptyDir for
/// the agent's trace until it is sent.
pub fn agent_job(j: &AgentJob) -> Job {
    let labels = serde_json::json!({RUN_LABEL: j.token, ROLE_LABEL: ROLE});
    let mut env_from = Vec::new();
    if let Some(s) = &j.cfg.env_secret {
        env_from.push(serde_json::json!({"secretRef": {"name": s}}));
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name(j.token), "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": j.count,
            "parallelism": j.count,
            "backoffLimit": 0,
            "activeDeadlineSeconds": j.deadline_s,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED_S,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": false,
                    "topologySpreadConstraints": [{
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                        "labelSelector": {"matchLabels": labels},
                    }],
                    "containers": [{
                        "name": CONTAINER,
                        "image": j.cfg.image,
                        "imagePullPolicy": j.cfg.image_pull_policy,
                        "args": j.args,
                        "env": [{"name": KEY_ENV, "value": j.key}],
                        "envFrom": env_from,
                        "volumeMounts": [
                            {"name": "scenario", "mountPath": j.cfg.scenario_dir, "readOnly": true},
                            {"name": "work", "mountPath": "/tmp"},
                        ],
                    }],
                    "volumes": [
                        {"name": "scenario", "configMap": {"name": j.cfg.scenario_config_map}},
                        {"name": "work", "emptyDir": {}},
                    ],
                },
            },
        },
    }))
    .unwrap_or_default()
}

fn jobs(ns: &str) -> Request {
    Request::new(<Job as kube::Resource>::url_path(&(), Some(ns)))
}

fn pods(ns: &str) -> Request {
    Request::new(<Pod as kube::Resource>::url_path(&(), Some(ns)))
}

pub fn create_job(ns: &str, job: &Job) -> Call {
    let name = job.metadata.name.clone().unwrap_or_default();
    let n = job.spec.as_ref().and_then(|s| s.completions).unwrap_or(0);
    Call::new(
        format!("create Indexed Job {name} ({n} agent pods)"),
        jobs(ns).create(
            &PostParams::default(),
            serde_json::to_vec(job).unwrap_or_default(),
        ),
    )
}

/// The agent pods of run `token`.
pub fn list_agent_pods(ns: &str, token: &str) -> Call {
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={token},{ROLE_LABEL}={ROLE}"));
    Call::new(
        format!("list the agent pods labelled {RUN_LABEL}={token}"),
        pods(ns).list(&lp),
    )
}

/// An agent pod's log (its stderr), at most [`LOG_LIMIT`] bytes.
pub fn agent_log(ns: &str, pod: &str) -> Call {
    let lp = LogParams {
        container: Some(CONTAINER.into()),
        limit_bytes: Some(LOG_LIMIT),
        ..LogParams::default()
    };
    Call::new(
        format!("read the log of agent pod {pod}"),
        pods(ns).logs(pod, &lp),
    )
}

/// Deletes the Job and its pods (a pod still running gets its grace period: SIGTERM).
pub fn delete_job(ns: &str, name: &str) -> Call {
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    Call::new(
        format!("delete Job {name} and its pods"),
        jobs(ns).delete(name, &dp),
    )
}

/// An agent pod as the coordinator reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentPod {
    pub name: String,
    /// Its share (the Job's completion index).
    pub index: Option<u64>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Unknown`.
    pub phase: String,
    /// Why it waits or how it ended: `waiting: ImagePullBackOff (…)`,
    /// `terminated: OOMKilled, exit code 137`.
    pub why: Option<String>,
}

impl AgentPod {
    pub fn of(p: &Pod) -> AgentPod {
        let index = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INDEX_ANNOTATION))
            .and_then(|i| i.parse().ok());
        let status = p.status.as_ref();
        let phase = status
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Pending".into());
        let state = status
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.name == CONTAINER))
            .and_then(|c| c.state.clone());
        let why = state.and_then(|s| {
            if let Some(t) = s.terminated {
                let how = t.reason.unwrap_or_else(|| "terminated".into());
                let sig = t
                    .signal
                    .map(|g| format!(", signal {g}"))
                    .unwrap_or_default();
                return Some(format!("terminated: {how}, exit code {}{sig}", t.exit_code));
            }
            s.waiting.map(|w| {
                let msg = w.message.map(|m| format!(" ({m})")).unwrap_or_default();
                format!("waiting: {}{msg}", w.reason.unwrap_or_default())
            })
        });
        let why = why.or_else(|| {
            // Not scheduled: the pod's condition says why.
            status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                })
                .map(|c| {
                    format!(
                        "unschedulable: {}",
                        c.message.clone().or(c.reason.clone()).unwrap_or_default()
                    )
                })
        });
        AgentPod {
            name: p.metadata.name.clone().unwrap_or_default(),
            index,
            phase,
            why,
        }
    }

    /// `pod NAME (Failed: terminated: OOMKilled, exit code 137)`.
    pub fn describe(&self) -> String {
        match &self.why {
            Some(w) => format!("pod {} ({}: {w})", self.name, self.phase),
            None => format!("pod {} ({})", self.name, self.phase),
        }
    }
}

/// The calls of the agents' Job for `haq run --dry-run --agents N` (none when the
/// agents are local): its creation, the pods' reads, their logs, its deletion.
pub fn dry_steps(plan: &Plan, count: u64, scenario_file: &str, sets: &[String]) -> Vec<Step> {
    let (Some(cfg), Some(k)) = (
        &plan.scenario.agents.kubernetes,
        &plan.scenario.target.kubernetes,
    ) else {
        return Vec::new();
    };
    let token = "RUNTOKEN";
    let url = cfg
        .advertise
        .clone()
        .unwrap_or_else(|| "http://POD_IP:PORT".into());
    let job = agent_job(&AgentJob {
        token,
        count,
        cfg,
        args: agent_args(cfg, scenario_file, sets, plan.seed, &url),
        key: "KEY",
        deadline_s: deadline_s(plan, cfg),
    });
    let ns = &k.namespace;
    let name = job_name(token);
    let pod = format!("{name}-0-XXXXX");
    let step = |when: &str, call: Call| Step {
        when: when.into(),
        note: call.describe(),
        call: Some(call),
    };
    vec![
        step("agents", create_job(ns, &job)),
        step("agents (polled)", list_agent_pods(ns, token)),
        step("agents' end", agent_log(ns, &pod)),
        step("agents' end", delete_job(ns, &name)),
    ]
}
