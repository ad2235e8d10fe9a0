//! The engines' own metrics around faults (Q12 step 14): while a run's faults are due,
//! every replica's Prometheus `/metrics` (on its own address, not through haq's proxy)
//! is read every [`SCRAPE_EVERY`] — before, during and after each fault, up to the end
//! of the load — and written to the trace as `engine_metrics` lines in haq's names,
//! from vLLM's (also the sim's), SGLang's or llama.cpp's. The checks compare them
//! before and after each fault's reroute (`check::cache_effects`). A replica whose
//! address gives no Prometheus text (down, or no such endpoint) gets no line. A
//! kubernetes replica's pod is read only when `target.kubernetes.metrics` asks.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;

use super::env::Env;
use crate::target::registry::Replica;
use crate::trace::Event;

/// How often each replica's metrics are read.
pub const SCRAPE_EVERY: Duration = Duration::from_millis(500);

/// haq's name of an engine metric, and each engine's names for it (the first found
/// wins: newer names before older ones).
const NAMES: &[(&str, &[&str])] = &[
    (
        "prefix_hits",
        &[
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ],
    ),
    (
        "prefix_queries",
        &[
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ],
    ),
    (
        "prefix_hit_rate",
        &["vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"],
    ),
    (
        "kv_usage",
        &[
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio",
        ],
    ),
    (
        "running",
        &[
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "llamacpp:requests_processing",
        ],
    ),
    (
        "waiting",
        &[
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "llamacpp:requests_deferred",
        ],
    ),
    (
        "prompt_tokens",
        &[
            "vllm:prompt_tokens_total",
            "sglang:prompt_tokens_total",
            "llamacpp:prompt_tokens_total",
        ],
    ),
    (
        "generation_tokens",
        &[
            "vllm:generation_tokens_total",
            "sglang:generation_tokens_total",
            "llamacpp:tokens_predicted_total",
        ],
    ),
];

/// Prometheus text exposition into haq's names: each metric summed over its label
/// sets (a server with several models or workers). `None` when nothing known is in it.
pub fn parse(text: &str) -> Option<(&'static str, BTreeMap<String, f64>)> {
    let mut raw: BTreeMap<&str, f64> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = &line[..name_end];
        // The value follows the labels (which may hold spaces in quotes).
        let rest = match line[name_end..].strip_prefix('{') {
            Some(r) => r.rsplit_once('}').map_or("", |x| x.1),
            None => &line[name_end..],
        };
        let Some(v) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        if v.is_finite() {
            *raw.entry(name).or_default() += v;
        }
    }
    let mut m = BTreeMap::new();
    let mut engine = None;
    for (ours, theirs) in NAMES {
        if let Some((name, v)) = theirs.iter().find_map(|n| raw.get(n).map(|v| (n, *v))) {
            m.insert((*ours).to_string(), v);
            engine.get_or_insert(name.split(':').next().unwrap_or(""));
        }
    }
    let engine = match engine? {
        "vllm" => "vllm",
        "sglang" => "sglang",
        _ => "llamacpp",
    };
    Some((engine, m))
}

/// Where a replica's metrics are read: its own address's `/metrics`; a kubernetes
/// replica's pod (its address now) only when `target.kubernetes.metrics` asks, at
/// the path and port it gives. `None`: not scraped.
pub fn url(r: &Replica) -> Option<String> {
    match r.pod() {
        Some(p) => {
            let m = p.cluster.metrics.as_ref()?;
            let mut pod = p.pod.clone();
            pod.port = m.port.unwrap_or(pod.port);
            (!pod.ip.is_empty()).then(|| format!("http://{}{}", pod.authority(), m.path))
        }
        None => Some(format!("{}/metrics", r.direct_url()?)),
    }
}

/// Reads one replica's metrics: its engine and the metrics in haq's names.
pub async fn read(
    admin: &reqwest::Client,
    r: &Replica,
) -> Option<(&'static str, BTreeMap<String, f64>)> {
    let resp = admin
        .get(url(r)?)
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    parse(&resp.text().await.ok()?)
}

/// Reads one replica's metrics and writes the line.
async fn one(env: &Env, r: &Replica) {
    if let Some((engine, m)) = read(&env.admin, r).await {
        env.trace.emit(Event::EngineMetrics {
            t: env.clock.now_us(),
            replica: r.name.clone(),
            engine: engine.into(),
            m,
        });
    }
}

/// Reads every replica's metrics every [`SCRAPE_EVERY`] until the load ends, once
/// more then.
pub async fn run(env: Arc<Env>) {
    let mut tick = tokio::time::interval(SCRAPE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = env.load_done.cancelled() => true,
        };
        join_all(env.registry.replicas.iter().map(|r| one(&env, r))).await;
        if last {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn each_engines_names_are_read_into_haqs() {
        let vllm = "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n\
            vllm:num_requests_running{model_name=\"m\",worker=\"w1\"} 3\n\
            vllm:kv_cache_usage_perc{model_name=\"m\"} 0.25\nvllm:gpu_cache_usage_perc{model_name=\"m\"} 0.25\n\
            vllm:prefix_cache_hits_total{model_name=\"a b\"} 40\nvllm:prefix_cache_queries_total{model_name=\"m\"} 100\n\
            vllm:prompt_tokens_total{model_name=\"m\",engine=\"0\"} 700\nvllm:prompt_tokens_total{model_name=\"m\",engine=\"1\"} 300\n";
        let (e, m) = parse(vllm).expect("vllm");
        assert_eq!(e, "vllm");
        assert_eq!(m["running"], 3.0);
        assert_eq!(m["kv_usage"], 0.25, "the newer name, not both");
        assert_eq!((m["prefix_hits"], m["prefix_queries"]), (40.0, 100.0));
        assert_eq!(m["prompt_tokens"], 1000.0, "summed over label sets");
        let (e, m) = parse("sglang:cache_hit_rate 0.5\nsglang:num_queue_reqs{tp_rank=\"0\"} 2\n")
            .expect("sglang");
        assert_eq!(
            (e, m["prefix_hit_rate"], m["waiting"]),
            ("sglang", 0.5, 2.0)
        );
        let (e, m) = parse("llamacpp:kv_cache_usage_ratio 0.1\nllamacpp:requests_deferred 1\n")
            .expect("llama.cpp");
        assert_eq!((e, m["kv_usage"], m["waiting"]), ("llamacpp", 0.1, 1.0));
        assert!(parse("up 1\nprocess_cpu_seconds_total 3\n").is_none());
        assert!(parse("<html>not metrics</html>").is_none());
    }
}
