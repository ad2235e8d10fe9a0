//! Evidence that lives outside the run directory, brought into it at the end of a run
//! so that `haq check RUN_DIR` needs no network (M10).

use std::path::{Path, PathBuf};

use crate::plan::Plan;
use crate::trace::files::TOOLS_FILE;

/// Brings evidence that lives outside the run directory into it at the end of a run,
/// so `haq check RUN_DIR` needs no network: `evidence.tool_log` (a path or an
/// `http(s)://` URL) becomes `RUN_DIR/tools.jsonl`. Returns what went wrong, if
/// anything (the judge then reports the tool log as missing).
pub async fn collect(plan: &Plan, dir: &Path) -> Result<(), String> {
    let Some(src) = &plan.scenario.evidence.tool_log else {
        return Ok(());
    };
    let dest = dir.join(TOOLS_FILE);
    if src.starts_with("http://") || src.starts_with("https://") {
        let http = crate::client::http_client(
            std::time::Duration::from_secs(5),
            &reqwest::header::HeaderMap::new(),
        )
        .map_err(|e| format!("tool log {src}: {e}"))?;
        let resp = http
            .get(src)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("tool log {src}: {e}"))?;
        let body = resp
            .bytes()
            .await
            .map_err(|e| format!("tool log {src}: {e}"))?;
        std::fs::write(&dest, &body).map_err(|e| format!("{}: {e}", dest.display()))
    } else {
        let p = PathBuf::from(src);
        if p == dest {
            return Ok(());
        }
        std::fs::copy(&p, &dest)
            .map(|_| ())
            .map_err(|e| format!("tool log {}: {e}", p.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(sets: &[&str]) -> Plan {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/quickstart.yaml");
        crate::plan::load(&p, &sets, None).unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_declared_tool_log_is_copied_into_the_run_from_a_file_or_a_url() {
        let dir = std::env::temp_dir().join(format!("haq-collect-{}", std::process::id()));
        let run = dir.join("run");
        std::fs::create_dir_all(&run).expect("dir");
        let line = r#"{"t_ns":1,"logical_request_id":"r1","tool_call_id":"c1","idempotency_key":"r1:c1","tool":"t","arguments":"{}","result":"ok","deduplicated":false}"#;
        let src = dir.join("tools-src.jsonl");
        std::fs::write(&src, format!("{line}\n{line}\n")).expect("write");
        let set = format!("evidence.tool_log={}", src.display());
        let p = plan(&[&set]);
        collect(&p, &run).await.expect("copied");
        let got = std::fs::read_to_string(run.join(TOOLS_FILE)).expect("read");
        assert_eq!(got.lines().count(), 2);

        // From a URL (a tool service's log endpoint on loopback).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let body = format!("{line}\n");
        let app =
            axum::Router::new().route("/log", axum::routing::get(move || async move { body }));
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        std::fs::remove_file(run.join(TOOLS_FILE)).expect("rm");
        let set = format!("evidence.tool_log=http://{addr}/log");
        collect(&plan(&[&set]), &run).await.expect("fetched");
        let got = std::fs::read_to_string(run.join(TOOLS_FILE)).expect("read");
        assert_eq!(got.lines().count(), 1);
        let set = format!("evidence.tool_log=http://{addr}/missing");
        let e = collect(&plan(&[&set]), &run).await.expect_err("404");
        assert!(e.contains("404"), "{e}");
        server.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
