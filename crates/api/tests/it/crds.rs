//! The checked-in CRDs are what the types generate, the step lists in them are the graphs',
//! and every sample manifest is accepted by the real API server.

use std::path::PathBuf;

use kube::api::PostParams;
use simplyblock_api::{
    ClusterDeploymentConfig, ControlPlane, ControlPlaneOps, OperatorOps, PersistentVolumeOps,
    SimplyblockDriver, StorageBackup, StorageBackupOps, StorageBackupPolicy, StorageCluster,
    StorageClusterOps, StorageDevice, StorageDeviceOps, StorageNode, StorageNodeOps, StoragePool,
    StoragePoolOps, StorageSiteDeployment, TestFailover, crd_file_name, crd_yaml, crds,
};
use simplyblock_statemachine::testing::assert_step_schema_matches;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn checked_in_crds_match_the_types() {
    let dir = repo_root().join(simplyblock_api::CHART_CRDS_DIR);
    let mut stale = Vec::new();
    for crd in crds() {
        let file = dir.join(crd_file_name(&crd));
        let expected = crd_yaml(&crd).expect("renders");
        let actual = std::fs::read_to_string(&file).unwrap_or_default();
        if actual != expected {
            stale.push(file.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "these CRDs differ from what the types generate: {stale:?}\nregenerate them with `cargo run -p simplyblock-api --bin crds` and commit the result"
    );
    let files = std::fs::read_dir(&dir)
        .expect("the chart's CRD templates")
        .count();
    assert_eq!(
        files,
        crds().len(),
        "{} holds a file no type generates",
        simplyblock_api::CHART_CRDS_DIR
    );
}

#[test]
fn the_charts_list_of_crd_names_is_the_types() {
    let helpers = std::fs::read_to_string(repo_root().join(simplyblock_api::CHART_HELPERS))
        .expect("_helpers.tpl");
    let generated =
        simplyblock_api::with_crd_names(&helpers).expect("the simplyblock.crdNames helper");
    assert!(
        generated == helpers,
        "templates/_helpers.tpl simplyblock.crdNames lists other CRDs than the types generate: regenerate it with `cargo run -p simplyblock-api --bin crds` and commit the result"
    );
    assert!(generated.contains("- storageclusters.storage.simplyblock.io\n"));
}

fn step_schema(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> serde_json::Value {
    let json = serde_json::to_value(crd).expect("crd json");
    json["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["step"]
        .clone()
}

#[test]
fn step_lists_in_the_crds_are_the_graphs() {
    use kube::CustomResourceExt;
    assert_step_schema_matches(
        &simplyblock_api::storage_cluster_ops::GRAPHS.declared_state_names(),
        &step_schema(&StorageClusterOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::operator_ops::GRAPHS.declared_state_names(),
        &step_schema(&OperatorOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_cluster::CREATION_GRAPH.declared_state_names(),
        &step_schema(&StorageCluster::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::cluster_deployment_config::EXPANSION_GRAPH.declared_state_names(),
        &step_schema(&ClusterDeploymentConfig::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_node::PROVISIONING_GRAPH.declared_state_names(),
        &step_schema(&StorageNode::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_node_ops::GRAPHS.declared_state_names(),
        &step_schema(&simplyblock_api::StorageNodeOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_pool_ops::GRAPHS.declared_state_names(),
        &step_schema(&StoragePoolOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::control_plane::INSTALL_GRAPH.declared_state_names(),
        &step_schema(&ControlPlane::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::control_plane_ops::GRAPHS.declared_state_names(),
        &step_schema(&ControlPlaneOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_device_ops::GRAPHS.declared_state_names(),
        &step_schema(&StorageDeviceOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::persistent_volume_ops::GRAPHS.declared_state_names(),
        &step_schema(&PersistentVolumeOps::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::test_failover::GRAPHS.declared_state_names(),
        &step_schema(&TestFailover::crd()),
    );
    assert_step_schema_matches(
        &simplyblock_api::storage_backup_ops::GRAPHS.declared_state_names(),
        &step_schema(&StorageBackupOps::crd()),
    );
}

#[test]
fn every_kind_has_a_sample() {
    for crd in crds() {
        let sample = repo_root().join("deploy/samples").join(format!(
            "{}.yaml",
            crd.spec.names.singular.clone().unwrap_or_default()
        ));
        assert!(
            sample.is_file(),
            "no sample for {}: {}",
            crd.spec.names.kind,
            sample.display()
        );
    }
}

#[tokio::test]
async fn samples_are_accepted_by_the_api_server() {
    let (client, ns) = crate::support::namespace("samples").await;
    for crd in crds() {
        let singular = crd.spec.names.singular.clone().unwrap_or_default();
        let path = repo_root().join(format!("deploy/samples/{singular}.yaml"));
        let text = std::fs::read_to_string(&path).expect("sample");
        let object: kube::api::DynamicObject =
            serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let api = match crd.spec.names.kind.as_str() {
            "StorageCluster" => crate::support::dynamic::<StorageCluster>(&client, &ns),
            "StorageClusterOps" => crate::support::dynamic::<StorageClusterOps>(&client, &ns),
            "ClusterDeploymentConfig" => {
                crate::support::dynamic::<ClusterDeploymentConfig>(&client, &ns)
            }
            "OperatorOps" => crate::support::dynamic::<OperatorOps>(&client, &ns),
            "StorageNode" => crate::support::dynamic::<StorageNode>(&client, &ns),
            "StorageNodeOps" => crate::support::dynamic::<StorageNodeOps>(&client, &ns),
            "StorageDevice" => crate::support::dynamic::<StorageDevice>(&client, &ns),
            "StorageDeviceOps" => crate::support::dynamic::<StorageDeviceOps>(&client, &ns),
            "StoragePool" => crate::support::dynamic::<StoragePool>(&client, &ns),
            "StoragePoolOps" => crate::support::dynamic::<StoragePoolOps>(&client, &ns),
            "ControlPlane" => crate::support::dynamic::<ControlPlane>(&client, &ns),
            "ControlPlaneOps" => crate::support::dynamic::<ControlPlaneOps>(&client, &ns),
            "SimplyblockDriver" => crate::support::dynamic::<SimplyblockDriver>(&client, &ns),
            "StorageSiteDeployment" => {
                crate::support::dynamic::<StorageSiteDeployment>(&client, &ns)
            }
            "TestFailover" => crate::support::dynamic::<TestFailover>(&client, &ns),
            "StorageBackupPolicy" => crate::support::dynamic::<StorageBackupPolicy>(&client, &ns),
            "StorageBackup" => crate::support::dynamic::<StorageBackup>(&client, &ns),
            "StorageBackupOps" => crate::support::dynamic::<StorageBackupOps>(&client, &ns),
            // Cluster-scoped: the namespace is not part of its address.
            "PersistentVolumeOps" => kube::Api::all_with(
                client.clone(),
                &kube::core::ApiResource::erase::<PersistentVolumeOps>(&()),
            ),
            other => panic!("no sample check for {other}"),
        };
        let created = api
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{} was refused: {e}", path.display()));
        // The typed structs read back what the server stored.
        let value = serde_json::to_value(&created).expect("json");
        match crd.spec.names.kind.as_str() {
            "StorageCluster" => {
                drop(serde_json::from_value::<StorageCluster>(value).expect("typed"))
            }
            "StorageClusterOps" => {
                drop(serde_json::from_value::<StorageClusterOps>(value).expect("typed"))
            }
            "ClusterDeploymentConfig" => {
                drop(serde_json::from_value::<ClusterDeploymentConfig>(value).expect("typed"))
            }
            "StorageNode" => drop(serde_json::from_value::<StorageNode>(value).expect("typed")),
            "StorageNodeOps" => {
                drop(serde_json::from_value::<StorageNodeOps>(value).expect("typed"))
            }
            "StoragePool" => drop(serde_json::from_value::<StoragePool>(value).expect("typed")),
            "StorageDevice" => drop(serde_json::from_value::<StorageDevice>(value).expect("typed")),
            "StorageDeviceOps" => {
                drop(serde_json::from_value::<StorageDeviceOps>(value).expect("typed"))
            }
            "StoragePoolOps" => {
                drop(serde_json::from_value::<StoragePoolOps>(value).expect("typed"))
            }
            "ControlPlane" => drop(serde_json::from_value::<ControlPlane>(value).expect("typed")),
            "ControlPlaneOps" => {
                drop(serde_json::from_value::<ControlPlaneOps>(value).expect("typed"))
            }
            "SimplyblockDriver" => {
                drop(serde_json::from_value::<SimplyblockDriver>(value).expect("typed"))
            }
            "PersistentVolumeOps" => {
                drop(serde_json::from_value::<PersistentVolumeOps>(value).expect("typed"))
            }
            "StorageSiteDeployment" => {
                drop(serde_json::from_value::<StorageSiteDeployment>(value).expect("typed"))
            }
            "TestFailover" => drop(serde_json::from_value::<TestFailover>(value).expect("typed")),
            "StorageBackupPolicy" => {
                drop(serde_json::from_value::<StorageBackupPolicy>(value).expect("typed"))
            }
            "StorageBackup" => drop(serde_json::from_value::<StorageBackup>(value).expect("typed")),
            "StorageBackupOps" => {
                drop(serde_json::from_value::<StorageBackupOps>(value).expect("typed"))
            }
            _ => drop(serde_json::from_value::<OperatorOps>(value).expect("typed")),
        }
    }
}

#[test]
fn every_kind_answers_to_its_full_singular_beside_its_short_names() {
    // `kubectl get stc` and `kubectl get storagecluster` both: the short names keep the
    // reference's spellings, and no one has to remember them.
    let mut short = std::collections::BTreeMap::new();
    for crd in crds() {
        let names = &crd.spec.names;
        assert_eq!(
            names.singular.as_deref(),
            Some(names.kind.to_lowercase().as_str()),
            "{}",
            names.kind
        );
        for s in names.short_names.iter().flatten() {
            assert_ne!(s, &names.kind.to_lowercase());
            if let Some(other) = short.insert(s.clone(), names.kind.clone()) {
                panic!("short name {s} is both {other}'s and {}'s", names.kind);
            }
        }
    }
    assert!(short.len() >= crds().len(), "{short:?}");
}

#[test]
fn the_charts_image_values_take_the_references_the_crds_take() {
    // The chart's schema checks the images it copies into the ControlPlane and the
    // SimplyblockDriver: with the CRDs' own patterns, or a value they refuse would render.
    use simplyblock_api::control_plane::{IMAGE_PATTERN, OPTIONAL_IMAGE_PATTERN};
    fn image_patterns(schema: &serde_json::Value, path: &str, out: &mut Vec<(String, String)>) {
        if let Some(pattern) = schema["pattern"].as_str().filter(|p| p.contains("sha256")) {
            out.push((path.to_owned(), pattern.to_owned()));
        }
        for (key, property) in schema["properties"].as_object().into_iter().flatten() {
            image_patterns(property, &format!("{path}.{key}"), out);
        }
    }
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            repo_root().join("deploy/charts/simplyblock-operator/values.schema.json"),
        )
        .expect("values.schema.json"),
    )
    .expect("the schema parses");
    let mut found = Vec::new();
    image_patterns(&schema, "", &mut found);
    assert!(found.len() >= 7, "the image values: {found:?}");
    for (path, pattern) in found {
        assert!(
            pattern == IMAGE_PATTERN || pattern == OPTIONAL_IMAGE_PATTERN,
            "{path} has its own image pattern {pattern}"
        );
    }
}
