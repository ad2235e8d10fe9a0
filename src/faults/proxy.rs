//! Proxy backend: a rule on haq's proxy in front of the replica (reset, close,
//! blackhole, delay, throttle), verified when every live connection of the path has
//! applied it; undone by removing the rule (verified the same way).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;

use super::backend::{Context, Injected, Injector, VERIFY_TIMEOUT};
use super::{Healed, Replica, Undo};
use crate::plan::FaultPlan;
use crate::proxy::{ReplicaProxy, Rule};
use crate::scenario::FaultAction;

pub struct ProxyInjector;

fn rule(f: &FaultPlan) -> Option<Rule> {
    Some(match f.action {
        FaultAction::Reset => Rule::Reset,
        FaultAction::Close => Rule::Close,
        FaultAction::Blackhole => Rule::Blackhole,
        FaultAction::Delay => Rule::Delay(f.delay?),
        FaultAction::Throttle => Rule::Throttle(f.bytes_per_s?),
        _ => return None,
    })
}

impl Injector for ProxyInjector {
    fn inject<'a>(
        &'a self,
        f: &'a FaultPlan,
        r: &'a Replica,
        _cx: &'a Context,
    ) -> BoxFuture<'a, (Injected, Option<Box<dyn Undo>>)> {
        Box::pin(async move {
            let at = Instant::now();
            let Some(p) = r.proxy.clone() else {
                return (
                    Injected::failed(at, None, format!("replica {} has no proxy", r.name)),
                    None,
                );
            };
            let Some(rule) = rule(f) else {
                return (
                    Injected::failed(
                        at,
                        None,
                        format!("the proxy backend cannot {}", f.action.as_str()),
                    ),
                    None,
                );
            };
            let open = p.connections();
            let (id, epoch) = p.add_rule(rule);
            let undo: Box<dyn Undo> = Box::new(RemoveRule {
                proxy: p.clone(),
                id,
            });
            let inj = match p.applied(epoch, VERIFY_TIMEOUT).await {
                Ok(n) => Injected {
                    at,
                    pid: None,
                    verified: true,
                    detail: match rule {
                        Rule::Reset | Rule::Close => format!(
                            "{rule:?} rule active on {} (upstream {}): {open} open connections cut, new ones cut on accept",
                            p.listen,
                            p.upstream().unwrap_or_default()
                        ),
                        _ => format!(
                            "{rule:?} rule active on {} (upstream {}), applied by all {n} live connections after {:.1}ms",
                            p.listen,
                            p.upstream().unwrap_or_default(),
                            at.elapsed().as_secs_f64() * 1e3
                        ),
                    },
                },
                Err(behind) => Injected::failed(
                    at,
                    None,
                    format!(
                        "{rule:?} rule added but {behind} connections had not applied it after {VERIFY_TIMEOUT:?}"
                    ),
                ),
            };
            (inj, Some(undo))
        })
    }
}

/// Removes a proxy rule and waits (on this thread) until every live connection
/// applied the removal.
pub struct RemoveRule {
    pub proxy: Arc<ReplicaProxy>,
    pub id: u64,
}

impl Undo for RemoveRule {
    fn undo(&mut self) -> Healed {
        let Some(epoch) = self.proxy.remove_rule(self.id) else {
            return Healed {
                verified: true,
                detail: "rule was no longer active".into(),
            };
        };
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            match self.proxy.applied_now(epoch) {
                Ok(n) => {
                    return Healed {
                        verified: true,
                        detail: format!(
                            "rule removed from {}; all {n} live connections forward again",
                            self.proxy.listen
                        ),
                    };
                }
                Err(behind) if Instant::now() >= deadline => {
                    return Healed {
                        verified: false,
                        detail: format!(
                            "rule removed from {}; {behind} connections had not applied the removal",
                            self.proxy.listen
                        ),
                    };
                }
                Err(_) => std::thread::sleep(Duration::from_millis(2)),
            }
        }
    }
}
