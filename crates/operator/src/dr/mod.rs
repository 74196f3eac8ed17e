//! Disaster recovery on a hub: the kinds that act across clusters through Open Cluster
//! Management, and the check that this API server is such a hub.
//!
//! [`run`] starts the hub's controllers only once the API server serves OCM's
//! `manifestworks` ([`hub`]): at once on a hub, or later, without a restart, when the hub
//! API is installed after the operator started. Until then it asks discovery again after
//! [`crate::runtime::context::Context::hub_first_retry`], then after waits doubling up to ten
//! minutes. It reports what it sees in two metrics:
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `simplyblock_hub_checks_total` | counter | `result` (`hub`, `not_hub`, `error`) |
//! | `simplyblock_hub_controllers_running_state` | gauge | 1 once the hub's controllers run |

pub mod bubble;
pub mod hub;
pub mod site_deployment;
pub mod test_failover;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::runtime::context::Context;

type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The controllers that run only on a hub, one line each.
fn hub_controllers(ctx: &Arc<Context>) -> Vec<Task> {
    vec![
        Box::pin(test_failover::run(ctx.clone())),
        Box::pin(site_deployment::run(ctx.clone())),
    ]
}

/// Waits until this API server is an OCM hub, then runs the hub's controllers until the
/// operator stops.
pub async fn run(ctx: Arc<Context>) {
    let metrics = ctx.metrics.clone();
    let hub = hub::until_hub_polling(&ctx.kube, &ctx.shutdown, ctx.hub_first_retry, |answer| {
        let result = match answer {
            Some(true) => "hub",
            Some(false) => "not_hub",
            None => "error",
        };
        metrics.count(
            "simplyblock_hub_checks_total",
            vec![("result", result.to_owned())],
        );
    })
    .await;
    if !hub {
        return;
    }
    tracing::info!("this API server serves OCM ManifestWorks: the hub's controllers start");
    metrics.set("simplyblock_hub_controllers_running_state", vec![], 1.0);
    futures::future::join_all(hub_controllers(&ctx)).await;
}
