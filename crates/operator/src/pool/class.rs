//! What a pool's StorageClass is: its name, labels and parameters, and what the pool asks
//! of the control plane. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::ObjectMeta;
use simplyblock_api::StoragePool;
use simplyblock_api::names::derived_name;
use simplyblock_api::storage_pool::{PoolLimits, PoolLimitsStatus, Throughput64, VolumeDefaults};
use simplyblock_api::{keys, quantity};
use simplyblock_controlplane::types::{Pool, PoolCreate, PoolUpdate};

pub const PROVISIONER: &str = keys::CSI_DRIVER_NAME;
pub const LABEL_NAMESPACE: &str = keys::NAMESPACE_LABEL;
pub const LABEL_CLUSTER: &str = keys::CLUSTER_LABEL;
pub const LABEL_POOL: &str = keys::POOL_LABEL;
pub const LABEL_MANAGED_BY: &str = keys::MANAGED_BY_LABEL;
pub const LABEL_STORAGE_ID: &str = keys::RAMEN_STORAGE_ID_LABEL;
/// The name of the pool the operator creates for every new cluster.
pub fn default_pool_name(cluster: &str) -> String {
    simplyblock_api::names::derived_name(
        &[cluster, "default"],
        simplyblock_api::names::MAX_LABEL_VALUE,
    )
}

/// The managed-by value of the classes this controller writes (and may delete).
pub const MANAGED_BY: &str = keys::MANAGED_BY_STORAGE_POOL;
/// A class name a person types and reads in `kubectl get sc`: at most 63 characters.
const MAX_CLASS_NAME: usize = 63;

/// The names a pool's class may take, in the order they are tried: the short one
/// (`simplyblock-<cluster>` for a cluster's default pool, `simplyblock-<pool>` for
/// another), then, when another pool's class holds it (StorageClasses are cluster-scoped,
/// pools are not), `simplyblock-<namespace>-<cluster>-<pool>`. Both are cut and hashed
/// past 63 characters.
pub fn storage_class_names(namespace: &str, cluster: &str, pool: &str) -> [String; 2] {
    let short = if pool == default_pool_name(cluster) {
        cluster
    } else {
        pool
    };
    [
        derived_name(&["simplyblock", short], MAX_CLASS_NAME),
        derived_name(&["simplyblock", namespace, cluster, pool], MAX_CLASS_NAME),
    ]
}

/// The first of `candidates` that is free or already this pool's class, and whether it
/// exists (nothing to create); `None` when every one belongs to something else.
pub fn pick_class_name<'a>(
    candidates: &'a [String],
    existing: &[Option<StorageClass>],
    namespace: &str,
    cluster: &str,
    pool: &str,
) -> Option<(&'a String, bool)> {
    candidates
        .iter()
        .zip(existing)
        .find(|(_, class)| {
            class
                .as_ref()
                .is_none_or(|c| is_managed(c) && is_assigned(c, namespace, cluster, pool))
        })
        .map(|(name, class)| (name, class.is_some()))
}

/// The annotation that makes a class the cluster's default.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

/// The three labels that assign a class to a pool (authored classes carry them too).
pub fn assignment_labels(namespace: &str, cluster: &str, pool: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAMESPACE.to_owned(), namespace.to_owned()),
        (LABEL_CLUSTER.to_owned(), cluster.to_owned()),
        (LABEL_POOL.to_owned(), pool.to_owned()),
    ])
}

/// The label selector of a pool's classes.
pub fn assignment_selector(namespace: &str, cluster: &str, pool: &str) -> String {
    assignment_labels(namespace, cluster, pool)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether this controller wrote `class` (so it may delete it).
pub fn is_managed(class: &StorageClass) -> bool {
    class
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == MANAGED_BY)
}

/// Whether `class` is assigned to the pool `namespace/pool` of `cluster`.
pub fn is_assigned(class: &StorageClass, namespace: &str, cluster: &str, pool: &str) -> bool {
    let Some(labels) = class.metadata.labels.as_ref() else {
        return false;
    };
    assignment_labels(namespace, cluster, pool)
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
}

/// The StorageClass parameters for a pool's volumes: where they go and their defaults.
pub fn parameters(
    cluster_uuid: &str,
    pool: &str,
    defaults: &VolumeDefaults,
) -> BTreeMap<String, String> {
    let mut p = BTreeMap::from([
        ("cluster_id".to_owned(), cluster_uuid.to_owned()),
        ("pool_name".to_owned(), pool.to_owned()),
        (
            "csi.storage.k8s.io/fstype".to_owned(),
            defaults.filesystem.as_str().to_owned(),
        ),
    ]);
    let mut set = |k: &str, v: Option<i32>| {
        if let Some(v) = v.filter(|v| *v > 0) {
            p.insert(k.to_owned(), v.to_string());
        }
    };
    set("max_iops", defaults.iops);
    if let Some(t) = &defaults.throughput {
        set("max_mbytes_per_sec", t.read_write);
        set("max_read_mbytes_per_sec", t.read);
        set("max_write_mbytes_per_sec", t.write);
    }
    set("lvol_priority_class", defaults.priority_class);
    set(
        "max_namespace_per_subsys",
        defaults.max_namespaces_per_subsystem,
    );
    // No `compression`: the CSI driver refuses `compression=true` (the control plane's
    // volume create has no such setting), so a class carrying it provisions nothing.
    // Admission refuses a pool that asks for it; one stored before that gets a class
    // without it.
    // Nor the client compression and deduplication: admission refuses both, since the
    // driver has no VDO layer to honour them.
    for (key, on) in [
        ("encryption", defaults.enable_encryption),
        ("replicate", defaults.enable_replication),
    ] {
        if on {
            p.insert(key.to_owned(), "true".to_owned());
        }
    }
    for (key, value) in [
        (
            "fabric",
            defaults.fabric.as_deref().map(str::to_ascii_lowercase),
        ),
        (
            "tune2fs_reserved_blocks",
            defaults.tune2fs_reserved_blocks.clone(),
        ),
    ] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            p.insert(key.to_owned(), v);
        }
    }
    p
}

/// The class `name` the controller writes for a pool whose cluster has `cluster_uuid`;
/// marked the cluster's default when `default` (the chart's `operator.defaultStorageClass`).
pub fn storage_class(
    pool: &StoragePool,
    cluster_uuid: &str,
    name_of_class: &str,
    default: bool,
) -> StorageClass {
    let namespace = pool.metadata.namespace.clone().unwrap_or_default();
    let name = pool.metadata.name.clone().unwrap_or_default();
    let cluster = &pool.spec.cluster_ref;
    let mut labels = assignment_labels(&namespace, cluster, &name);
    labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned());
    labels.extend(dr_labels(cluster_uuid));
    let defaults = pool.spec.volume_defaults.clone().unwrap_or_default();
    let mut parameters = parameters(cluster_uuid, &name, &defaults);
    // Volumes of a pool that names its Nodes are scheduled onto those Nodes: the node
    // plugin reports the pool's access label as topology.
    if let Some(uuid) = pool.status.as_ref().and_then(|s| s.uuid.as_deref())
        && !pool.spec.allowed_nodes.is_empty()
    {
        parameters.insert(
            "dhchap_node_selector".to_owned(),
            keys::pool_access_label(uuid),
        );
    }
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name_of_class.to_owned()),
            labels: Some(labels),
            annotations: default.then(|| {
                BTreeMap::from([(DEFAULT_CLASS_ANNOTATION.to_owned(), "true".to_owned())])
            }),
            ..ObjectMeta::default()
        },
        provisioner: PROVISIONER.to_owned(),
        parameters: Some(parameters),
        reclaim_policy: Some("Delete".to_owned()),
        volume_binding_mode: Some("WaitForFirstConsumer".to_owned()),
        allow_volume_expansion: Some(true),
        ..StorageClass::default()
    }
}

/// The labels Ramen reads on a pool's class: the storage instance, the cluster's UUID
/// (the same on every pool's class of the cluster, different at the peer site). No
/// replication id: Ramen reads that from the VolumeReplicationClass (docs/DR.md).
pub fn dr_labels(cluster_uuid: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_STORAGE_ID.to_owned(), cluster_uuid.to_owned())])
}

/// The labels a class the controller wrote lacks or carries at another value (written by
/// an earlier release, or changed by hand): what to merge into it, `None` when it has
/// them all.
pub fn missing_dr_labels(
    class: &StorageClass,
    cluster_uuid: &str,
) -> Option<BTreeMap<String, String>> {
    let have = class.metadata.labels.clone().unwrap_or_default();
    let missing: BTreeMap<String, String> = dr_labels(cluster_uuid)
        .into_iter()
        .filter(|(k, v)| have.get(k) != Some(v))
        .collect();
    (!missing.is_empty()).then_some(missing)
}

/// Why a pool's limits cannot be sent: every field that does not parse, at once.
pub fn limit_errors(limits: Option<&PoolLimits>) -> Vec<String> {
    let Some(l) = limits else { return Vec::new() };
    let mut errors = Vec::new();
    for (field, value) in [
        ("capacity", &l.capacity),
        ("maxVolumeSize", &l.max_volume_size),
    ] {
        if let Some(Err(e)) = value.as_deref().map(quantity::parse) {
            errors.push(format!("spec.limits.{field}: {e}"));
        }
    }
    errors
}

/// A limit in bytes, as the control plane reads sizes (`10T` is 10^12, `10Ti` 2^40).
fn bytes(v: Option<&String>) -> u64 {
    v.and_then(|s| quantity::parse(s).ok()).unwrap_or(0)
}

/// Whether `pool` is created in the control plane as a DH-HMAC-CHAP pool: the only kind
/// whose host list the control plane keeps and enforces, so a pool that names
/// allowedNodes is one. Fixed at creation: the control plane cannot turn it on later.
/// With an empty host list nothing is restricted, which is what `enableDHCHAP` without
/// allowedNodes means.
pub fn restricts_hosts(pool: &StoragePool) -> bool {
    !pool.spec.allowed_nodes.is_empty()
        || pool
            .spec
            .volume_defaults
            .as_ref()
            .is_some_and(|d| d.enable_dhchap)
}

/// The control plane's create body for `pool`.
pub fn create_params(pool: &StoragePool) -> PoolCreate {
    let limits = pool.spec.limits.clone().unwrap_or_default();
    PoolCreate {
        name: pool.metadata.name.clone().unwrap_or_default(),
        pool_max: bytes(limits.capacity.as_ref()),
        volume_max_size: bytes(limits.max_volume_size.as_ref()),
        dhchap: restricts_hosts(pool),
        cr_name: pool.metadata.name.clone().unwrap_or_default(),
        cr_namespace: pool.metadata.namespace.clone().unwrap_or_default(),
        cr_plural: "storagepools".to_owned(),
        ..PoolCreate::default()
    }
}

/// The QoS ceilings the control plane reports for `found`.
pub fn limits_status(found: &Pool) -> PoolLimitsStatus {
    let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    PoolLimitsStatus {
        iops: int(found.max_rw_iops),
        throughput: Throughput64 {
            read: int(found.max_r_mbytes),
            write: int(found.max_w_mbytes),
            read_write: int(found.max_rw_mbytes),
        },
    }
}

/// The update that brings the control plane's limits to the spec's, if they differ.
pub fn limits_update(pool: &StoragePool, found: &Pool) -> Option<PoolUpdate> {
    let want = create_params(pool);
    let mut update = PoolUpdate::default();
    if found.max_size != want.pool_max {
        update.max_size = Some(want.pool_max);
    }
    if found.volume_max_size != want.volume_max_size {
        update.volume_max_size = Some(want.volume_max_size);
    }
    (update != PoolUpdate::default()).then_some(update)
}

#[cfg(test)]
mod tests {
    use super::*;
    use simplyblock_api::storage_pool::{Filesystem, StoragePoolSpec, Throughput};

    fn pool(limits: Option<PoolLimits>, defaults: Option<VolumeDefaults>) -> StoragePool {
        let mut p = StoragePool::new(
            "fast",
            StoragePoolSpec {
                cluster_ref: "prod".into(),
                allowed_nodes: vec![],
                limits,
                volume_defaults: defaults,
            },
        );
        p.metadata.namespace = Some("storage".into());
        p
    }

    #[test]
    fn a_class_is_named_after_its_pool_or_its_clusters_default_pool_after_the_cluster() {
        assert_eq!(
            storage_class_names("storage", "prod", "fast"),
            ["simplyblock-fast", "simplyblock-storage-prod-fast"]
        );
        let default_pool = default_pool_name("prod");
        assert_eq!(
            storage_class_names("storage", "prod", &default_pool)[0],
            "simplyblock-prod"
        );
        for [short, long] in [
            storage_class_names(&"n".repeat(63), &"c".repeat(63), &"p".repeat(63)),
            storage_class_names(&"n".repeat(200), "c", "p"),
        ] {
            assert!(short.len() <= 63 && long.len() <= 63, "{short} {long}");
        }
        assert_ne!(
            storage_class_names(&"n".repeat(200), "c", "p")[1],
            storage_class_names(&"n".repeat(201), "c", "p")[1]
        );
    }

    #[test]
    fn the_first_installs_class_is_short_enough_to_type() {
        // Discovery names the cluster after its run (initial-discovery on a first
        // install); its default pool's class is the one the README and the demo use.
        let cluster = "initial-discovery";
        let pool = default_pool_name(cluster);
        let [class, _] = storage_class_names("simplyblock", cluster, &pool);
        assert_eq!(class, "simplyblock-initial-discovery");
        assert!(class.len() < 30, "{class}");
    }

    #[test]
    fn a_name_another_pool_holds_is_passed_over_and_the_pools_own_is_kept() {
        let names = storage_class_names("storage", "prod", "fast");
        let ours = storage_class(&pool(None, None), "c1", &names[0], false);
        let mut theirs = ours.clone();
        theirs.metadata.labels = Some(assignment_labels("other", "prod", "fast"));
        let pick = |existing: &[Option<StorageClass>]| {
            pick_class_name(&names, existing, "storage", "prod", "fast")
                .map(|(name, exists)| (name.clone(), exists))
        };
        assert_eq!(pick(&[None, None]), Some((names[0].clone(), false)));
        assert_eq!(
            pick(&[Some(ours.clone()), None]),
            Some((names[0].clone(), true))
        );
        assert_eq!(
            pick(&[Some(theirs.clone()), None]),
            Some((names[1].clone(), false))
        );
        assert_eq!(pick(&[Some(theirs.clone()), Some(theirs)]), None);
    }

    #[test]
    fn the_class_the_chart_names_is_marked_the_clusters_default_and_no_other() {
        // operator.defaultStorageClass: the operator marks that class when it writes it.
        let marked = storage_class(&pool(None, None), "c1", "simplyblock-fast", true);
        assert_eq!(
            marked
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .map(String::as_str),
            Some("true")
        );
        let plain = storage_class(&pool(None, None), "c1", "simplyblock-fast", false);
        assert!(plain.metadata.annotations.is_none());
    }

    #[test]
    fn the_class_is_labelled_for_its_pool_and_names_it() {
        let class = storage_class(&pool(None, None), "c1", "simplyblock-fast", false);
        assert!(is_managed(&class));
        assert!(is_assigned(&class, "storage", "prod", "fast"));
        assert!(!is_assigned(&class, "storage", "prod", "slow"));
        let params = class.parameters.expect("parameters");
        assert_eq!(params["cluster_id"], "c1");
        assert_eq!(params["pool_name"], "fast");
        assert_eq!(params["csi.storage.k8s.io/fstype"], "xfs");
        assert_eq!(
            params.len(),
            3,
            "no default is written that was not asked: {params:?}"
        );
        assert_eq!(class.provisioner, PROVISIONER);
    }

    #[test]
    fn the_class_names_its_storage_instance_for_ramen() {
        let class = storage_class(&pool(None, None), "c1", "simplyblock-fast", false);
        let labels = class.metadata.labels.clone().expect("labels");
        assert_eq!(labels["ramendr.openshift.io/storageid"], "c1");
        // Replication ids are the replication classes', not the StorageClass's.
        assert!(!labels.contains_key("ramendr.openshift.io/replicationid"));
        assert!(!labels.contains_key("ramendr.openshift.io/groupreplicationid"));
        assert_eq!(missing_dr_labels(&class, "c1"), None);
        // Another cluster's class, or one written before the label: the label to merge.
        assert_eq!(
            missing_dr_labels(&class, "c2"),
            Some(BTreeMap::from([(
                LABEL_STORAGE_ID.to_owned(),
                "c2".to_owned()
            )]))
        );
        let mut older = class.clone();
        older.metadata.labels = Some(assignment_labels("storage", "prod", "fast"));
        assert_eq!(missing_dr_labels(&older, "c1"), Some(dr_labels("c1")));
    }

    #[test]
    fn volume_defaults_become_the_new_parameter_keys() {
        let defaults = VolumeDefaults {
            iops: Some(20000),
            throughput: Some(Throughput {
                read: Some(100),
                write: Some(0),
                read_write: Some(300),
            }),
            filesystem: Filesystem::Ext4,
            enable_encryption: true,
            fabric: Some("RDMA".into()),
            tune2fs_reserved_blocks: Some("0".into()),
            ..VolumeDefaults::default()
        };
        let params = parameters("c1", "fast", &defaults);
        assert_eq!(params["fabric"], "rdma");
        assert_eq!(
            params["tune2fs_reserved_blocks"], "0",
            "0 is asked, not absent"
        );
        assert_eq!(params["max_iops"], "20000");
        assert_eq!(params["max_mbytes_per_sec"], "300");
        assert_eq!(params["max_read_mbytes_per_sec"], "100");
        assert!(
            !params.contains_key("max_write_mbytes_per_sec"),
            "0 is unlimited"
        );
        assert_eq!(params["encryption"], "true");
        assert_eq!(params["csi.storage.k8s.io/fstype"], "ext4");
        assert!(!params.contains_key("compression"));
    }

    #[test]
    fn compression_is_never_written_since_the_driver_refuses_it() {
        let defaults = VolumeDefaults {
            enable_compression: true,
            enable_replication: true,
            ..VolumeDefaults::default()
        };
        let params = parameters("c1", "fast", &defaults);
        assert!(!params.contains_key("compression"), "{params:?}");
        assert_eq!(params["replicate"], "true");
    }

    #[test]
    fn limits_are_sent_in_bytes_and_updated_only_when_they_differ() {
        let p = pool(
            Some(PoolLimits {
                capacity: Some("10T".into()),
                max_volume_size: Some("2T".into()),
                ..PoolLimits::default()
            }),
            None,
        );
        let create = create_params(&p);
        // T is 10^12, as the control plane reads sizes.
        assert_eq!(create.pool_max, 10_000_000_000_000);
        assert_eq!(create.volume_max_size, 2_000_000_000_000);
        assert_eq!(create.cr_plural, "storagepools");
        let mut found = Pool {
            max_size: 10_000_000_000_000,
            volume_max_size: 2_000_000_000_000,
            ..Pool::default()
        };
        assert_eq!(limits_update(&p, &found), None);
        found.volume_max_size = 0;
        assert_eq!(
            limits_update(&p, &found),
            Some(PoolUpdate {
                volume_max_size: Some(2_000_000_000_000),
                ..PoolUpdate::default()
            })
        );
    }

    #[test]
    fn limits_read_iec_units_and_the_fractions_the_schema_admits() {
        let p = pool(
            Some(PoolLimits {
                capacity: Some("10Ti".into()),
                max_volume_size: Some("1.5Ti".into()),
                ..PoolLimits::default()
            }),
            None,
        );
        assert_eq!(limit_errors(p.spec.limits.as_ref()), Vec::<String>::new());
        let create = create_params(&p);
        assert_eq!(create.pool_max, 10 << 40);
        assert_eq!(create.volume_max_size, 3 << 39);
    }

    #[test]
    fn every_bad_limit_is_reported_at_once() {
        let errors = limit_errors(Some(&PoolLimits {
            capacity: Some("lots".into()),
            max_volume_size: Some("2X".into()),
            ..PoolLimits::default()
        }));
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.limits.capacity: \"lots\" does not start with a number"),
            "{errors:?}"
        );
        assert!(errors[1].contains("unit \"X\""), "{errors:?}");
    }
}
