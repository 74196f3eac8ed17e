//! The hub check that gates the disaster-recovery kinds, on API servers of their own: a
//! managed cluster (only AppliedManifestWork served) is not a hub, an API server with the
//! OCM ManifestWork CRD is.

use simplyblock_operator::context::Shutdown;
use simplyblock_operator::dr::hub::{
    MANIFESTWORKS, WORK_GROUP_VERSION, serves_manifestworks, until_hub,
};
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
    // The group is served now (what a managed cluster looks like) ...
    let resources = client
        .list_api_group_resources(WORK_GROUP_VERSION)
        .await
        .expect("the work group is served");
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
    assert!(
        until_hub(&client, &Shutdown::new()).await,
        "the wait ends once ManifestWorks are served"
    );
    assert!(
        serves_manifestworks(&client)
            .await
            .expect("discovery answers")
    );
}
