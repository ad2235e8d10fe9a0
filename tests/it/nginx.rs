//! haq's proxy observes without changing what it measures (issue 21 item 2, M4): the
//! same scenario through real nginx (the Debian package) with and without haq's
//! proxy between nginx and its two upstreams gives nginx's exact same behaviour.
//!
//! Two sim workers (real processes) behind nginx: round robin, `proxy_next_upstream
//! error timeout` (nginx's default), no upstream keepalive (nginx's default: a
//! connection per request), once with passive health checks off (`max_fails=0`: every
//! request round robin puts on b meets its refusal) and once with nginx's own
//! (`max_fails=1 fail_timeout=30s`: the first refusal takes b out for the rest of the
//! run). `haq run` SIGKILLs worker b through the `process` backend, and a bounded
//! series of POST streaming requests (constant 1/s for 10 s, each done in well under
//! that; the kill lands 500 ms after one, with nothing in flight) goes through nginx.
//! The marker is put in `user` so that haq sends the same requests either way
//! (`client.marker: auto` calibrates first, behind proxies only). Without haq nginx's
//! connect to the dead b is refused — `connect() failed (111: Connection refused)` —
//! and it passes the request on to a: every answer 200. With haq's proxy in the path
//! (nginx's upstreams are haq's listen addresses) the request statuses, the upstreams
//! nginx tried and answered from (its access log), and its error-log lines about
//! upstreams must be the same; and haq records each of those refused connects
//! (`proxy_refused`, how: refused).
//!
//! The test fails where the proxy changes nginx's behaviour: with the listener left
//! open after the kill and the upstream connected only after the first request (the
//! proxy before issue 21 item 2), nginx's POST to b is read and reset, nginx does not
//! resend it, and the client gets a 502 where it had a 200 (checked by hand, see the
//! commit).
//!
//! nginx is not installed system-wide: `.ci/run` unpacks the Debian package
//! (`apt-get download nginx nginx-common` + `dpkg-deb -x`) and sets `HAQ_NGINX` and
//! `HAQ_REQUIRE_NGINX=1`. Elsewhere the test looks for `nginx` on the PATH or in
//! /usr/sbin and says "skipped" when there is none.

use std::path::{Path, PathBuf};
use std::time::Duration;

use haq::trace::{Event, RefusedHow};

use crate::routing::{Bed, bed};
use crate::simkit::{eventually, free_port};
use crate::support::{events, plan_text, run};

fn nginx_bin() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("HAQ_NGINX") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|d| d.join("nginx"))
        .find(|p| p.is_file())
}

/// nginx on 127.0.0.1:`port` in front of `ups`, its files under `dir`. Its master
/// and worker run in a process group of their own, killed whole when this is dropped
/// (a SIGKILLed master leaves its worker listening).
struct Nginx {
    child: tokio::process::Child,
    url: String,
    access: PathBuf,
    error: PathBuf,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill has no memory preconditions; -pid is nginx's own group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
    }
}

async fn nginx(bin: &Path, dir: &Path, ups: &[String; 2], fails: &str) -> Nginx {
    let prefix = dir.join(format!("nginx-{}", fails.replace([' ', '='], "")));
    std::fs::create_dir_all(prefix.join("temp")).expect("nginx dir");
    let port = free_port();
    let (access, error) = (prefix.join("access.log"), prefix.join("error.log"));
    let servers: String = ups
        .iter()
        .map(|u| format!("        server {u} {fails};\n"))
        .collect();
    // SAFETY: geteuid has no preconditions.
    let user = if unsafe { libc::geteuid() } == 0 {
        "user root;"
    } else {
        ""
    };
    let conf = format!(
        r#"{user}
worker_processes 1;
pid {p}/nginx.pid;
error_log {e} info;
events {{ worker_connections 256; }}
http {{
    client_body_temp_path {p}/temp/body;
    proxy_temp_path {p}/temp/proxy;
    fastcgi_temp_path {p}/temp/fastcgi;
    uwsgi_temp_path {p}/temp/uwsgi;
    scgi_temp_path {p}/temp/scgi;
    log_format up '$request_method $uri $status rid=$http_x_request_id up=$upstream_addr us=$upstream_status';
    access_log {a} up;
    upstream llm {{
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://llm;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_request_buffering off;
            proxy_next_upstream error timeout;
        }}
    }}
}}
"#,
        p = prefix.display(),
        e = error.display(),
        a = access.display(),
    );
    let conf_path = prefix.join("nginx.conf");
    std::fs::write(&conf_path, conf).expect("nginx.conf");
    let child = tokio::process::Command::new(bin)
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf_path)
        .arg("-e")
        .arg(&error)
        .args(["-g", "daemon off;"])
        .process_group(0)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("nginx starts");
    eventually("nginx listens", Duration::from_secs(20), async || {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    Nginx {
        child,
        url: format!("http://127.0.0.1:{port}"),
        access,
        error,
    }
}

/// What nginx did, with upstream addresses named by replica: each access-log line
/// (method, path, status, request id, the upstreams tried and their statuses), and
/// its error-log lines about upstream failures (`[warn]` and up, addresses named too).
#[derive(Debug, PartialEq)]
struct Seen {
    access: Vec<String>,
    errors: Vec<String>,
    refused: usize,
}

fn seen(n: &Nginx, ups: &[String; 2]) -> Seen {
    let name = |line: &str| line.replace(&ups[0], "a").replace(&ups[1], "b");
    let access: Vec<String> = std::fs::read_to_string(&n.access)
        .unwrap_or_default()
        .lines()
        .map(name)
        .collect();
    let log = std::fs::read_to_string(&n.error).unwrap_or_default();
    let mut errors = Vec::new();
    // `[info]` lines are about what the client did (haq's start-up GET closing its
    // connection while nginx still reads the upstream's answer: a race of the
    // client's, with or without haq's proxy); upstream failures are `[warn]` and up.
    let failures = ["[warn]", "[error]", "[crit]", "[alert]", "[emerg]"];
    for l in log
        .lines()
        .filter(|l| l.contains("upstream") && failures.iter().any(|f| l.contains(f)))
    {
        // `2026/12/01 21:14:15 [error] 123#123: *45 connect() failed (111: …) while
        // connecting to upstream, client: …, upstream: "http://…"`: keep what nginx
        // said and at what level, not when, its pid, connection number or the
        // client's port.
        let level = failures.iter().find(|f| l.contains(*f)).unwrap_or(&"");
        let what = l.split_once(": *").map_or(l, |(_, r)| r);
        let what = what.split_once(' ').map_or(what, |(_, r)| r);
        let what = what.split(", client:").next().unwrap_or(what);
        let upstream = l
            .split("upstream: \"")
            .nth(1)
            .and_then(|u| u.split('"').next());
        errors.push(name(&format!(
            "{level} {what} -> {}",
            upstream.unwrap_or("-")
        )));
    }
    let refused = errors
        .iter()
        .filter(|e| e.contains("connect() failed (111: Connection refused)"))
        .count();
    Seen {
        access,
        errors,
        refused,
    }
}

/// One run: nginx in front of `bed`'s workers (or haq's listen addresses).
async fn once(bin: &Path, bed: &Bed, proxy: bool, fails: &str) -> (Seen, Vec<Event>) {
    let ups = bed.upstreams(proxy);
    let n = nginx(bin, &bed.dir, &ups, fails).await;
    // Arrivals 1 s apart; the kill lands 500 ms after one, with nothing in flight
    // even on a busy machine (a request that took 170 ms there was cut when they
    // were 333 ms apart), and 500 ms before the next. A fault phase of 8 s: six
    // requests after the kill, three of them round-robined onto b.
    let text = bed
        .scenario(&n.url, proxy, "1/s", "1500ms", "")
        .replace("{name: fault, duration: 5s}", "{name: fault, duration: 8s}");
    assert!(text.contains("duration: 8s"), "the bed's phases changed");
    let r = run(plan_text(&text, &[]), "nginx").await;
    // nginx writes its logs as it goes; let the last lines land.
    tokio::time::sleep(Duration::from_millis(200)).await;
    (seen(&n, &ups), events(&r))
}

/// Each request's status and outcome, as haq's client saw it.
fn answers(evs: &[Event]) -> Vec<(String, Option<u16>, String)> {
    evs.iter()
        .filter_map(|e| match e {
            Event::End {
                id,
                status,
                outcome,
                ..
            } => Some((id.clone(), *status, outcome.as_str().to_string())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_behaves_the_same_with_and_without_haqs_proxy_when_a_replica_dies() {
    let Some(bin) = nginx_bin() else {
        assert!(
            std::env::var("HAQ_REQUIRE_NGINX").as_deref() != Ok("1"),
            "HAQ_REQUIRE_NGINX=1 but no nginx (HAQ_NGINX, PATH, /usr/sbin)"
        );
        crate::support::skipped(
            "nginx::nginx_behaves_the_same_with_and_without_haqs_proxy_when_a_replica_dies",
            "no nginx (set HAQ_NGINX to an nginx binary to run this test)",
        );
        return;
    };
    // Passive health checks off (`max_fails=0`: every request round robin puts on b
    // meets its refusal and moves on to a), then nginx's own (`max_fails=1`: the first
    // refusal takes b out for longer than the run).
    for (fails, at_least) in [("max_fails=0", 2), ("max_fails=1 fail_timeout=30s", 1)] {
        same_with_and_without(&bin, fails, at_least).await;
    }
}

async fn same_with_and_without(bin: &Path, fails: &str, at_least: usize) {
    let without = bed("nginx-without").await;
    let (plain, plain_evs) = once(bin, &without, false, fails).await;
    let with = bed("nginx-with").await;
    let (through, haq_evs) = once(bin, &with, true, fails).await;
    // nginx met the dead b: its connects refused, each request passed on to a.
    assert!(plain.refused >= at_least, "{fails}: {plain:#?}");
    if fails.contains("fail_timeout") {
        assert_eq!(plain.refused, 1, "{fails}: {plain:#?}");
    }
    assert!(
        plain
            .access
            .iter()
            .any(|l| l.contains("up=b, a us=502, 200")),
        "{fails}: {plain:#?}"
    );
    assert_eq!(
        through, plain,
        "{fails}: nginx behaved otherwise through haq's proxy"
    );
    let (a, b) = (answers(&plain_evs), answers(&haq_evs));
    assert_eq!(b, a, "{fails}: the client's answers differ");
    assert!(
        a.iter()
            .all(|(_, s, o)| *s == Some(200) && o == "completed"),
        "{fails}: {a:?}"
    );
    // haq recorded every connect nginx had refused.
    let recorded = haq_evs
        .iter()
        .filter(|e| matches!(e, Event::ProxyRefused { replica, how: RefusedHow::Refused, .. } if replica == "b"))
        .count();
    assert_eq!(recorded, through.refused, "{fails}: {haq_evs:?}");
}
