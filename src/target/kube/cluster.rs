//! The cluster a kubernetes target acts in: the client (built for the allowed
//! context only), the namespace and selector every call is bound to, the run's token
//! (the `haq.dev/run` label of every object haq creates), and each replica's pod.

use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::calls::Call;
use crate::plan::kubernetes::{ContextSource, Requirement, check_context, parse_selector};
use crate::scenario::{IN_CLUSTER, KubeTarget};

/// What every fault and watch of a kubernetes target shares.
pub struct Cluster {
    pub client: kube::Client,
    /// The context the client was built for (inside the allow-list).
    pub context: String,
    pub namespace: String,
    pub selector_text: String,
    pub selector: Vec<Requirement>,
    /// The value of the `haq.dev/run` label on everything this run creates.
    pub token: String,
    /// How a `worker` fault's pod is replaced.
    pub replacement: crate::scenario::KubeReplacement,
    /// Where each pod's metrics are scraped (`None`: they are not).
    pub metrics: Option<crate::scenario::KubeMetrics>,
    /// The runtime the client's connections live on (heals run off it).
    runtime: tokio::runtime::Handle,
    /// The scale-downs faults made, by replica (`replacement: scale`).
    scaled: std::sync::Mutex<std::collections::BTreeMap<String, super::workload::Scaled>>,
    /// The nodes node faults found cordoned or cordoned, by node: held while a node
    /// is read and cordoned, so the injections of one fault into several pods of a
    /// node cordon it once.
    pub cordons: tokio::sync::Mutex<std::collections::BTreeMap<String, Cordoned>>,
}

/// A node a node fault of this run cordoned, or found cordoned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cordoned {
    /// By fault `fault`, with replica `replica`'s pod (its injection heals it).
    ByHaq { fault: String, replica: String },
    /// Before haq (left so on heal).
    Before,
}

impl Cluster {
    /// The cluster of `k`, reached through `client`. Must run inside a runtime.
    pub fn new(
        client: kube::Client,
        context: String,
        k: &KubeTarget,
        token: String,
    ) -> anyhow::Result<Cluster> {
        let selector = parse_selector(&k.selector).map_err(anyhow::Error::msg)?;
        Ok(Cluster {
            client,
            context,
            namespace: k.namespace.clone(),
            selector_text: k.selector.clone(),
            selector,
            token,
            replacement: k.replacement,
            metrics: k.metrics.clone(),
            runtime: tokio::runtime::Handle::current(),
            scaled: Default::default(),
            cordons: Default::default(),
        })
    }

    /// Records the scale-down a fault made of replica `replica`'s workload.
    pub fn record_scaled(&self, replica: &str, s: super::workload::Scaled) {
        let mut m = self.scaled.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(replica.to_string(), s);
    }

    /// The scale-down of replica `replica`'s workload, if a fault made one.
    pub fn scaled(&self, replica: &str) -> Option<super::workload::Scaled> {
        let m = self.scaled.lock().unwrap_or_else(|e| e.into_inner());
        m.get(replica).cloned()
    }

    /// Sends a call and reads its answer.
    pub async fn send<T: serde::de::DeserializeOwned>(&self, call: Call) -> Result<T, kube::Error> {
        self.client.request(call.req).await
    }

    /// Runs `fut` to completion from synchronous code (a heal, possibly while the
    /// run unwinds): on its own thread, driven by the client's runtime, for at most
    /// `limit`; `None` if it did not finish.
    pub fn block_on<T: Send + 'static>(
        &self,
        limit: Duration,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::channel();
        let rt = self.runtime.clone();
        std::thread::spawn(move || {
            let _ = tx.send(rt.block_on(fut));
        });
        rx.recv_timeout(limit).ok()
    }
}

/// The kind of an API error, for the trace: its HTTP code and message.
pub fn api_error(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, format!("{} {}: {}", s.code, s.reason, s.message)),
        other => (0, other.to_string()),
    }
}

/// A client for the scenario's context, re-checked against the allow-list (the
/// kubeconfig may have changed since `haq validate`); the context's name.
pub async fn connect(k: &KubeTarget) -> anyhow::Result<(kube::Client, String)> {
    let context = check_context(k, &ContextSource::read()).map_err(|i| {
        anyhow::anyhow!(
            "`{}`: {}{}",
            i.field,
            i.reason,
            i.value
                .map(|v| format!(" (value: {v})"))
                .unwrap_or_default()
        )
    })?;
    let client = client_for(&context).await?;
    Ok((client, context))
}

/// A client for kubeconfig context `context` (`in-cluster`: the service account's).
pub async fn client_for(context: &str) -> anyhow::Result<kube::Client> {
    let config = if context == IN_CLUSTER {
        kube::Config::incluster()
            .map_err(|e| anyhow::anyhow!("the in-cluster configuration: {e}"))?
    } else {
        let kc = Kubeconfig::read().map_err(|e| anyhow::anyhow!("reading the kubeconfig: {e}"))?;
        let opts = KubeConfigOptions {
            context: Some(context.to_string()),
            ..KubeConfigOptions::default()
        };
        kube::Config::from_custom_kubeconfig(kc, &opts)
            .await
            .map_err(|e| anyhow::anyhow!("kubeconfig context {context}: {e}"))?
    };
    crate::wire::tls::install_crypto_provider();
    kube::Client::try_from(config)
        .map_err(|e| anyhow::anyhow!("a client for context {context}: {e}"))
}
