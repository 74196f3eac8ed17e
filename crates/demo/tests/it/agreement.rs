//! What the operator writes is what the CSI driver reads: the CSI secret, the Node labels
//! that place volumes on storage nodes, and the parameters of a pool's StorageClass, each
//! put through the operator's writer and the driver's reader.

use std::collections::{BTreeMap, HashMap};

use kube::CustomResourceExt;
use proptest::prelude::*;
use simplyblock_api::StoragePool;
use simplyblock_api::keys;
use simplyblock_api::storage_pool::{Filesystem, StoragePoolSpec, Throughput, VolumeDefaults};
use simplyblock_csi::clusters::parse_secret;
use simplyblock_csi::params::{ClassParams, storage_nodes_in};
use simplyblock_csi::topology::segments;
use simplyblock_operator::csi_secret::{self, Entry};
use simplyblock_operator::pool::class;
use simplyblock_operator::workload::topology_label;
use uuid::Uuid;

fn entry(cluster: Uuid, endpoint: &str, secret: &str) -> Entry {
    Entry {
        cluster_id: cluster.to_string(),
        cluster_endpoint: endpoint.into(),
        cluster_secret: secret.into(),
        extra: Default::default(),
    }
}

/// The `(cluster, endpoint, secret, local)` of every cluster the driver reads from the
/// Secret data the operator writes for `contents`.
fn driver_reads(contents: &csi_secret::Contents) -> Vec<(Uuid, String, String, bool)> {
    let data = simplyblock_api::csi_secret::secret_data(contents);
    let text = String::from_utf8(data[csi_secret::KEY].0.clone()).expect("utf-8");
    parse_secret(&text)
        .expect("the driver reads what the operator writes")
        .into_iter()
        .map(|e| (e.cluster_id, e.cluster_endpoint, e.cluster_secret, e.local))
        .collect()
}

#[test]
fn the_driver_reads_the_csi_secret_the_operator_writes() {
    let (a, b) = (Uuid::from_u128(0xa), Uuid::from_u128(0xb));
    let endpoint = "http://simplyblock-webappapi:5000";
    let one = csi_secret::with_entry(&Default::default(), &entry(b, endpoint, "secret-b"))
        .expect("added");
    let two = csi_secret::with_entry(&one, &entry(a, endpoint, "secret-a")).expect("added");
    let rotated = csi_secret::with_entry(&two, &entry(a, endpoint, "rotated-a")).expect("changed");
    assert_eq!(
        driver_reads(&rotated),
        vec![
            (a, endpoint.to_string(), "rotated-a".to_string(), false),
            (b, endpoint.to_string(), "secret-b".to_string(), false),
        ]
    );
    let mut marked = rotated.clone();
    marked.local.insert(b.to_string());
    let removed = csi_secret::without_entry(&marked, &a.to_string()).expect("removed");
    assert_eq!(
        driver_reads(&removed),
        vec![(b, endpoint.to_string(), "secret-b".to_string(), true)]
    );
}

#[test]
fn the_driver_places_volumes_by_the_topology_labels_the_operator_writes() {
    let (cluster, other) = (Uuid::from_u128(0xc1), Uuid::from_u128(0xc2));
    let (n0, n1, m0) = (
        Uuid::from_u128(0x10),
        Uuid::from_u128(0x11),
        Uuid::from_u128(0x20),
    );
    // A worker serving two slots of one cluster and one of another, labelled by the
    // operator's workload.
    let labels: BTreeMap<String, String> = [
        (topology_label(&cluster.to_string(), 0), n0.to_string()),
        (topology_label(&cluster.to_string(), 1), n1.to_string()),
        (topology_label(&other.to_string(), 0), m0.to_string()),
        ("kubernetes.io/hostname".to_string(), "worker-1".to_string()),
    ]
    .into();
    let reported = segments(&labels, "worker-1");
    for key in labels
        .keys()
        .filter(|k| k.as_str() != "kubernetes.io/hostname")
    {
        assert_eq!(
            reported.get(key),
            labels.get(key),
            "the node plugin reports {key} as topology"
        );
    }
    assert_eq!(
        storage_nodes_in(cluster, std::slice::from_ref(&reported), &[]),
        vec![n0, n1]
    );
    assert_eq!(storage_nodes_in(other, &[], &[reported]), vec![m0]);
}

#[test]
fn the_pool_schema_refuses_the_one_default_the_driver_cannot_honour() {
    let crd = serde_json::to_value(StoragePool::crd()).expect("json");
    let rules = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["volumeDefaults"]["properties"]["enableCompression"]["x-kubernetes-validations"];
    assert_eq!(rules[0]["rule"], "!self", "{rules}");
    // What the rule keeps out is what the driver refuses.
    let cluster = Uuid::from_u128(0xc1).to_string();
    let asked: HashMap<String, String> = [
        ("cluster_id", cluster.as_str()),
        ("pool_name", "fast"),
        ("compression", "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert!(ClassParams::parse(&asked).is_err());
}

/// Volume defaults within the pool schema's ranges: limits at least 0, at least one
/// namespace per subsystem. Compression either way: its CEL rule refuses it now, but a
/// pool stored before the rule still gets a class.
fn volume_defaults() -> impl Strategy<Value = VolumeDefaults> {
    let limit = || proptest::option::of(0..=i32::MAX);
    (
        limit(),
        proptest::option::of((limit(), limit(), limit())),
        any::<bool>(),
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
        limit(),
        proptest::option::of(1..=i32::MAX),
        (
            proptest::option::of("(|tcp|rdma|TCP|RDMA)"),
            proptest::option::of("([0-9]|[1-4][0-9]|50)?"),
        ),
    )
        .prop_map(
            |(
                iops,
                throughput,
                ext4,
                (compression, encryption, replication, dhchap),
                priority,
                namespaces,
                (fabric, tune2fs_reserved_blocks),
            )| {
                VolumeDefaults {
                    iops,
                    throughput: throughput.map(|(read, write, read_write)| Throughput {
                        read,
                        write,
                        read_write,
                    }),
                    filesystem: if ext4 {
                        Filesystem::Ext4
                    } else {
                        Filesystem::Xfs
                    },
                    enable_compression: compression,
                    enable_encryption: encryption,
                    enable_replication: replication,
                    enable_dhchap: dhchap,
                    priority_class: priority,
                    max_namespaces_per_subsystem: namespaces,
                    fabric,
                    tune2fs_reserved_blocks,
                    ..VolumeDefaults::default()
                }
            },
        )
}

fn positive(v: Option<i32>) -> u64 {
    v.and_then(|v| u64::try_from(v).ok()).unwrap_or(0)
}

proptest! {
    #[test]
    fn every_class_the_operator_writes_is_one_the_driver_accepts(
        defaults in volume_defaults(),
        allowed_nodes in proptest::collection::vec("[a-z]{1,8}", 0..3),
        created in any::<bool>(),
    ) {
        let mut pool = StoragePool::new(
            "fast",
            StoragePoolSpec {
                cluster_ref: "prod".into(),
                allowed_nodes,
                limits: None,
                volume_defaults: Some(defaults.clone()),
            },
        );
        pool.metadata.namespace = Some("storage".into());
        // Once created, a pool naming Nodes schedules onto its access label.
        pool.status = created.then(|| simplyblock_api::storage_pool::StoragePoolStatus {
            uuid: Some(Uuid::from_u128(0x9001).to_string()),
            ..Default::default()
        });
        let cluster = Uuid::from_u128(0xc1);
        let written = class::storage_class(&pool, &cluster.to_string(), "simplyblock-fast", false);
        prop_assert_eq!(written.provisioner.as_str(), keys::CSI_DRIVER_NAME);
        let parameters: HashMap<String, String> =
            written.parameters.unwrap_or_default().into_iter().collect();
        let read = match ClassParams::parse(&parameters) {
            Ok(read) => read,
            Err(e) => return Err(TestCaseError::fail(format!("the driver refuses {parameters:?}: {e}"))),
        };
        prop_assert_eq!(read.cluster_id, Some(cluster));
        prop_assert_eq!(read.pool_name.as_deref(), Some("fast"));
        prop_assert_eq!(read.encryption, defaults.enable_encryption);
        prop_assert_eq!(read.replicate, defaults.enable_replication);
        prop_assert_eq!(read.qos_rw_iops, positive(defaults.iops));
        let throughput = defaults.throughput.clone().unwrap_or_default();
        prop_assert_eq!(read.qos_rw_mbytes, positive(throughput.read_write));
        prop_assert_eq!(read.qos_r_mbytes, positive(throughput.read));
        prop_assert_eq!(read.qos_w_mbytes, positive(throughput.write));
        prop_assert_eq!(u64::from(read.priority_class), positive(defaults.priority_class));
        prop_assert_eq!(
            read.max_namespace_per_subsys,
            defaults.max_namespaces_per_subsystem.map_or(1, |n| n as u32)
        );
        let fabric = defaults.fabric.as_deref().filter(|f| !f.is_empty()).unwrap_or("tcp");
        prop_assert_eq!(read.fabric.as_str(), fabric.to_ascii_lowercase());
        prop_assert_eq!(
            read.dhchap_node_selector.is_some(),
            created && !pool.spec.allowed_nodes.is_empty()
        );
    }
}
