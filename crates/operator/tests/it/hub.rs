//! The hub check that gates the disaster-recovery kinds, on API servers of their own: a
//! managed cluster (only AppliedManifestWork served) is not a hub, an API server with the
//! OCM ManifestWork CRD is.

use simplyblock_operator::dr::hub::{
    MANIFESTWORKS, WORK_GROUP_VERSION, serves_manifestworks, until_hub_polling,
};
use simplyblock_operator::runtime::context::Shutdown;
use simplyblock_testenv::TestEnv;
use simplyblock_testenv::standin::minimal_crd;

const WORK_GROUP: &str = "work.open-cluster-management.io";

#[tokio::test]
async fn only_a_server_of_manifestworks_is_a_hub() {
    let env = TestEnv::start().await.expect("an API server of its own");
    let client = env.client().await.expect("a client");
    assert!(
        !serves_manifestworks(&client)
            .await
            .expect("discovery answers"),
        "a bare API server is no hub"
    );

    env.install_crds(&[minimal_crd(
        WORK_GROUP,
        "v1",
        "AppliedManifestWork",
        "appliedmanifestworks",
        &[],
    )])
    .await
    .expect("the managed cluster's CRD installs");
    // The group is served now (what a managed cluster looks like); discovery publishes it
    // a moment after the CRD is Established ...
    let resources = crate::support::until("the work group served", async || {
        client
            .list_api_group_resources(WORK_GROUP_VERSION)
            .await
            .ok()
    })
    .await;
    assert!(
        resources
            .resources
            .iter()
            .any(|r| r.name == "appliedmanifestworks")
    );
    // ... and still this is no hub.
    assert!(
        !serves_manifestworks(&client)
            .await
            .expect("discovery answers")
    );

    env.install_crds(&[minimal_crd(
        WORK_GROUP,
        "v1",
        "ManifestWork",
        MANIFESTWORKS,
        &["mw"],
    )])
    .await
    .expect("the hub's CRD installs");
    // Discovery may lag the CRD by a moment: the poll starts short here.
    assert!(
        until_hub_polling(
            &client,
            &Shutdown::new(),
            std::time::Duration::from_millis(50),
            |_| {}
        )
        .await,
        "the wait ends once ManifestWorks are served"
    );
    assert!(
        serves_manifestworks(&client)
            .await
            .expect("discovery answers")
    );
}

/// The operator's hub task on an API server that becomes a hub while it runs: it keeps
/// asking and starts nothing while only AppliedManifestWork is served, and starts the
/// hub's controllers, without a restart, once the ManifestWork CRD is installed.
#[tokio::test]
async fn the_hub_controllers_start_once_manifestworks_are_served() {
    use std::sync::Arc;
    use std::time::Duration;

    use simplyblock_operator::runtime::context::Context;
    use simplyblock_testenv::ocm;

    use crate::support::{cp_client, until};

    let env = TestEnv::start().await.expect("an API server of its own");
    let client = env.client().await.expect("a client");
    env.install_crds(&ocm::managed_cluster_crds())
        .await
        .expect("the managed cluster's CRD installs");
    // The operator's own CRDs, as every installation has them: a controller whose kind is
    // not served never syncs its cache, and so never finishes a graceful shutdown.
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("the operator's CRDs install");
    let shutdown = Shutdown::new();
    let ctx = Arc::new(
        Context::new(
            client,
            cp_client("http://127.0.0.1:9"),
            "http://127.0.0.1:9".into(),
            "simplyblock-system".into(),
        )
        .with_shutdown(shutdown.clone())
        .with_hub_first_retry(Duration::from_millis(50)),
    );
    let metrics = ctx.metrics.clone();
    let task = tokio::spawn(simplyblock_operator::dr::run(ctx));

    let checks = |result: &str| {
        metrics
            .sample("simplyblock_hub_checks_total", &[("result", result)])
            .unwrap_or(0.0)
    };
    until("discovery asked twice on a managed cluster", async || {
        (checks("not_hub") >= 2.0).then_some(())
    })
    .await;
    assert_eq!(
        metrics.sample("simplyblock_hub_controllers_running_state", &[]),
        None,
        "a managed cluster runs no hub controller"
    );
    assert_eq!(checks("hub"), 0.0);

    env.install_crds(&ocm::hub_crds())
        .await
        .expect("the hub's CRDs install");
    until("the hub's controllers running", async || {
        (metrics.sample("simplyblock_hub_controllers_running_state", &[]) == Some(1.0))
            .then_some(())
    })
    .await;
    assert_eq!(checks("hub"), 1.0, "the polling ends once the hub is seen");

    shutdown.fire();
    tokio::time::timeout(crate::support::PATIENCE, task)
        .await
        .expect("the hub's controllers stop when the operator does")
        .expect("the hub task ends with the operator");
}
