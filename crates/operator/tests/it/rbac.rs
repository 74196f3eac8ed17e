//! The operator under test is the chart's ServiceAccount, not an administrator: what the
//! chart's roles do not grant is refused to it.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume};
use kube::api::{Api, ListParams};
use simplyblock_api::StorageCluster;

#[tokio::test]
async fn the_operator_holds_only_what_the_chart_grants() {
    crate::support::api_server().await;
    let operator = crate::support::operator_kube().await;

    // Granted: the storage kinds, cluster-wide.
    Api::<StorageCluster>::all(operator.clone())
        .list(&ListParams::default())
        .await
        .expect("the chart grants listing StorageClusters");

    // Not granted: anything the operator has no business with.
    for refused in [
        Api::<Namespace>::all(operator.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ()),
        Api::<PersistentVolume>::all(operator.clone())
            .list(&ListParams::default())
            .await
            .map(|_| ()),
    ] {
        match refused {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
            other => panic!("the operator was not refused: {other:?}"),
        }
    }
}
