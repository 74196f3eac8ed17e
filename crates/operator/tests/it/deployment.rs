//! A deployment document, approved, expands into a cluster and its nodes on a real API
//! server, with the cluster created in sbsim by the StorageCluster controller.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_api::cluster_deployment_config::{
    ClusterDeploymentConfig, DeploymentPhase, ExpansionStep,
};
use simplyblock_api::{StorageCluster, StorageClusterOps, StorageNode};
use simplyblock_operator::runtime::context::Context;
use simplyblock_operator::{cluster, deployment};
use simplyblock_simulator::{Server, Sim, SimConfig};

use crate::support::{TOKEN, until};

const NS: &str = "deploy";

#[tokio::test]
async fn an_approved_document_becomes_a_cluster_with_its_nodes_and_asks_for_activation() {
    let env = crate::support::api_server().await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, NS)
        .await
        .expect("namespace");
    for w in ["w1", "w2", "w3"] {
        let node: Node = serde_json::from_value(json!({"metadata": {"name": w}})).expect("node");
        Api::<Node>::all(kube.clone())
            .create(&PostParams::default(), &node)
            .await
            .expect("node");
    }

    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let (tls, ca_pem) = crate::support::sbsim_tls_material();
    let sim = Server::start(
        Sim::open(SimConfig {
            tokens: vec![TOKEN.into()],
            time_scale: 1000.0,
            ..SimConfig::new(dir.path().join("state"))
        })
        .expect("sim"),
        "127.0.0.1:0",
        Some(tls),
    )
    .await
    .expect("sbsim");
    let cp = crate::support::tls_cp_client(sim.addr, &ca_pem, TOKEN);
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube().await,
            cp.clone(),
            crate::support::MANAGED_TLS_ENDPOINT.into(),
            NS.into(),
        )
        .watching(NS),
    );
    let cluster_controller = tokio::spawn(cluster::controller::run(ctx.clone()));
    let deployment_controller = tokio::spawn(deployment::controller::run(ctx.clone()));

    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    let doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    let mut doc = doc;
    doc.spec.node_sets[0].groups[0].workers = vec!["w1".into(), "w2".into(), "w3".into()];
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("draft");
    let name = doc.metadata.name.clone().expect("name");

    // A draft is validated, not expanded.
    let message = until("the draft's review message", async || {
        docs.get(&name).await.ok()?.status?.message
    })
    .await;
    assert_eq!(
        message,
        "ready for review: 3 worker(s) in 1 node set(s); set spec.approved to deploy"
    );
    let clusters: Api<StorageCluster> = Api::namespaced(kube.clone(), NS);
    assert!(
        clusters
            .get_opt("simplyblock")
            .await
            .expect("get")
            .is_none(),
        "a draft creates nothing"
    );

    docs.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"approved": true}})),
    )
    .await
    .expect("approve");

    let status = until("the expansion to wait for its nodes", async || {
        let s = docs.get(&name).await.ok()?.status?;
        (s.step.state.as_deref() == Some(ExpansionStep::Activating.as_str())).then_some(s)
    })
    .await;
    assert_eq!(status.phase, DeploymentPhase::Expanding);
    assert_eq!(status.cluster_ref.as_deref(), Some("simplyblock"));
    assert_eq!(
        status.node_refs,
        ["simplyblock-w1-0", "simplyblock-w2-0", "simplyblock-w3-0"]
    );
    assert!(status.expansion_started_at.is_some());

    let cluster = clusters.get("simplyblock").await.expect("cluster");
    assert!(
        cluster.status.and_then(|s| s.uuid).is_some(),
        "the cluster exists in the control plane"
    );
    assert!(
        cluster.metadata.owner_references.is_none(),
        "the document owns nothing it creates"
    );
    let nodes: Api<StorageNode> = Api::namespaced(kube.clone(), NS);
    let listed = nodes.list(&Default::default()).await.expect("nodes").items;
    assert_eq!(listed.len(), 3);
    for n in &listed {
        assert_eq!(n.spec.config.sizing.vcpu_count, 4);
        assert_eq!(n.spec.config.device_names.len(), 4);
        let owner = n.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(
            owner.first().map(|o| o.kind.as_str()),
            Some("StorageCluster")
        );
    }

    // Restarting the controllers changes nothing that exists.
    deployment_controller.abort();
    let _ = deployment_controller.await;
    let deployment_controller = tokio::spawn(deployment::controller::run(ctx.clone()));
    crate::support::passes(&ctx.metrics, "clusterdeploymentconfig", NS, &name, 1).await;
    assert_eq!(
        nodes
            .list(&Default::default())
            .await
            .expect("nodes")
            .items
            .len(),
        3
    );

    // Once every node reports Online (the provisioning controller's write), activation is
    // requested exactly once and the document is Expanded.
    for n in &listed {
        nodes
            .patch_status(
                &n.metadata.name.clone().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Online"}})),
            )
            .await
            .expect("node online");
    }
    let expanded = until("the document to be Expanded", async || {
        let s = docs.get(&name).await.ok()?.status?;
        (s.phase == DeploymentPhase::Expanded).then_some(s)
    })
    .await;
    crate::kubectl::ready_on(
        env.kubeconfig_path(),
        &docs,
        "clusterdeploymentconfigs.storage.simplyblock.io",
        &name,
    )
    .await;
    assert_eq!(
        expanded.message.as_deref(),
        Some("expanded: StorageCluster simplyblock with 3 storage node(s)")
    );
    let ops: Api<StorageClusterOps> = Api::namespaced(kube.clone(), NS);
    let activate = ops
        .get("simplyblock-activate")
        .await
        .expect("the activation request");
    assert_eq!(
        activate.spec.action,
        simplyblock_api::storage_cluster_ops::ClusterAction::Activate
    );
    assert_eq!(
        activate
            .metadata
            .owner_references
            .unwrap_or_default()
            .first()
            .map(|o| o.kind.clone()),
        Some("ClusterDeploymentConfig".to_string())
    );
    cluster_controller.abort();
    deployment_controller.abort();
}

/// A status decided on a read that another writer has since overtaken is refused by the
/// resourceVersion it carries (409, a requeue), not written over the newer status; decided
/// again on a fresh read, it lands.
#[tokio::test]
async fn a_status_decided_on_a_stale_read_is_refused_not_written_over_a_newer_one() {
    const NS: &str = "deploy-stale";
    // A draft's status is written from the API server alone: no control plane is asked.
    let (kube, ctx) = drafts_only(NS).await;
    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    let doc: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    docs.create(&PostParams::default(), &doc)
        .await
        .expect("draft");
    let name = doc.metadata.name.clone().expect("name");

    let seen = docs.get(&name).await.expect("read");
    let newer = "written by someone else after the read";
    docs.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Draft", "message": newer}})),
    )
    .await
    .expect("a concurrent status write");

    let stale = deployment::controller::reconcile(Arc::new(seen), ctx.clone())
        .await
        .expect_err("a write onto a stale read");
    assert!(stale.is_stale(), "{stale}");
    let stored = docs.get(&name).await.expect("read").status.expect("status");
    assert_eq!(
        stored.message.as_deref(),
        Some(newer),
        "the newer status stays"
    );

    let fresh = docs.get(&name).await.expect("read");
    deployment::controller::reconcile(Arc::new(fresh), ctx)
        .await
        .expect("a write onto a fresh read");
    let stored = docs.get(&name).await.expect("read").status.expect("status");
    let message = stored.message.expect("message");
    assert_ne!(message, newer);
    assert!(message.contains("approv"), "{message}");
}

/// A document has no finalizer: its phase series go with it all the same, swept once the
/// controller's cache no longer holds it, and a neighbour's stay.
#[tokio::test]
async fn a_deleted_documents_phase_series_go_and_a_neighbours_stay() {
    const NS: &str = "deploy-sweep";
    const PHASE: &str = "simplyblock_clusterdeploymentconfig_phase_state";
    // Drafts only: their passes read the API server alone, no control plane is asked.
    let (kube, ctx) = drafts_only(NS).await;
    let controller = tokio::spawn(deployment::controller::run(ctx.clone()));

    let docs: Api<ClusterDeploymentConfig> = Api::namespaced(kube.clone(), NS);
    let sample: ClusterDeploymentConfig = serde_saphyr::from_str(include_str!(
        "../../../../deploy/samples/clusterdeploymentconfig.yaml"
    ))
    .expect("sample");
    let (kept, deleted) = ("kept", "deleted");
    for name in [kept, deleted] {
        let mut doc = sample.clone();
        doc.metadata.name = Some(name.into());
        docs.create(&PostParams::default(), &doc)
            .await
            .expect("draft");
    }
    let draft = |name: &str| {
        ctx.metrics.sample(
            PHASE,
            &[("namespace", NS), ("name", name), ("phase", "Draft")],
        )
    };
    for name in [kept, deleted] {
        until(&format!("{name}'s phase series"), async || {
            (draft(name) == Some(1.0)).then_some(())
        })
        .await;
    }

    docs.delete(deleted, &DeleteParams::default())
        .await
        .expect("delete");
    until("the deleted document's phase series to go", async || {
        DeploymentPhase::ALL
            .iter()
            .all(|p| {
                let phase = format!("{p:?}");
                ctx.metrics
                    .sample(
                        PHASE,
                        &[("namespace", NS), ("name", deleted), ("phase", &phase)],
                    )
                    .is_none()
            })
            .then_some(())
    })
    .await;
    assert_eq!(draft(kept), Some(1.0), "the neighbour's series stay");
    assert_eq!(
        ctx.metrics.sample(
            PHASE,
            &[("namespace", NS), ("name", kept), ("phase", "Expanded")]
        ),
        Some(0.0)
    );
    controller.abort();
}

/// The shared API server's admin client and an operator context watching namespace `ns`
/// (created), whose control plane answers nothing: for passes over drafts, which read the
/// API server alone.
async fn drafts_only(ns: &str) -> (kube::Client, Arc<Context>) {
    let env = crate::support::api_server().await;
    env.install_crds(&simplyblock_api::crds())
        .await
        .expect("CRDs");
    let kube = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&kube, ns)
        .await
        .expect("namespace");
    let ctx = Arc::new(
        Context::new(
            crate::support::operator_kube().await,
            crate::support::cp_client("http://127.0.0.1:9"),
            crate::support::MANAGED_TLS_ENDPOINT.into(),
            ns.into(),
        )
        .watching(ns),
    );
    (kube, ctx)
}
