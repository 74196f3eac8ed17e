//! Per-claim controls on the real API server and sbsim (the control plane's stand-in):
//! the driver reads each claim as the controller's ServiceAccount under the chart's RBAC,
//! carries its controls into the volume create, removes the one-shot placement hint, and
//! refuses bad controls with an event on the claim.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};
use simplyblock_controlplane::Uuid;
use simplyblock_csi::clusters::Clusters;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::common::*;

/// The namespace the claims of these tests live in; the chart's CSI bindings name the
/// controller's account there (one namespace per process, since the bindings are
/// cluster-wide).
pub const NAMESPACE: &str = "csi-claims";
/// The account the controller plugin runs as (the operator writes it).
const CONTROLLER_ACCOUNT: &str = "simplyblock-csi-controller-sa";

static IDENTITY: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// The namespace, the controller's account and the chart's roles and bindings for it.
async fn identity(env: &simplyblock_testenv::TestEnv) {
    IDENTITY
        .get_or_init(|| async {
            let admin = env.client().await.expect("admin");
            match simplyblock_testenv::create_namespace(&admin, NAMESPACE).await {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => panic!("namespace: {e}"),
            }
            let account: ServiceAccount = serde_json::from_value(
                serde_json::json!({"metadata": {"name": CONTROLLER_ACCOUNT}}),
            )
            .expect("account");
            match Api::<ServiceAccount>::namespaced(admin.clone(), NAMESPACE)
                .create(&PostParams::default(), &account)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => panic!("account: {e}"),
            }
            simplyblock_testenv::chart::install_identity(env, NAMESPACE)
                .await
                .expect("the chart's roles and bindings");
        })
        .await;
}

/// sbsim, the driver reading claims as the controller's account, and an admin client.
pub struct ClaimEnv {
    pub sim: Sbsim,
    pub driver: DriverProc,
    pub admin: kube::Client,
    /// Holds the driver's socket until the test ends.
    _dir: tempfile::TempDir,
}

impl ClaimEnv {
    pub async fn start() -> ClaimEnv {
        let env = simplyblock_testenv::TestEnv::shared().expect("API server");
        identity(env).await;
        let admin = env.client().await.expect("admin");
        let controller = env
            .service_account_client(NAMESPACE, CONTROLLER_ACCOUNT)
            .await
            .expect("the controller's client");
        let sim = sbsim(3).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let clusters = Clusters::new(&[sim.entry()], None).expect("clusters");
        let driver = DriverProc::start_with_kube(
            dir.path(),
            clusters,
            &sim.files,
            BTreeMap::new(),
            Some(controller),
        )
        .await;
        ClaimEnv {
            sim,
            driver,
            admin,
            _dir: dir,
        }
    }

    /// Creates claim `name` with these annotations and labels.
    pub async fn claim(&self, name: &str, annotations: &[(&str, &str)], labels: &[(&str, &str)]) {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let pvc: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "annotations": map(annotations), "labels": map(labels)},
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": "simplyblock",
                "resources": {"requests": {"storage": "1Gi"}}
            }
        }))
        .expect("claim");
        Api::<PersistentVolumeClaim>::namespaced(self.admin.clone(), NAMESPACE)
            .create(&PostParams::default(), &pvc)
            .await
            .expect("create claim");
    }

    /// The class parameters with the provisioner's `--extra-create-metadata` for `claim`.
    pub fn params_for(&self, claim: &str) -> HashMap<String, String> {
        let mut p = self.sim.params();
        p.insert("csi.storage.k8s.io/pvc/name".into(), claim.into());
        p.insert("csi.storage.k8s.io/pvc/namespace".into(), NAMESPACE.into());
        p
    }

    /// CreateVolume for `claim`, as the provisioner names the volume.
    pub async fn create(
        &self,
        ctl: &mut ControllerClient<Channel>,
        claim: &str,
        topology: Option<csi::TopologyRequirement>,
    ) -> Result<csi::Volume, tonic::Status> {
        create_for(
            ctl,
            &format!("pvc-{claim}"),
            self.params_for(claim),
            topology,
        )
        .await
    }

    /// The volume a handle names, as the control plane holds it.
    pub async fn volume(&self, handle: &str) -> simplyblock_controlplane::Volume {
        let id: Uuid = handle
            .rsplit(':')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("handle");
        self.sim
            .client
            .get_volume(self.sim.cluster, self.sim.pool, id)
            .await
            .expect("volume")
    }

    /// The Warning events recorded on claim `name`.
    pub async fn events_on(&self, name: &str) -> Vec<Event> {
        Api::<Event>::namespaced(self.admin.clone(), NAMESPACE)
            .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
            .await
            .expect("events")
            .items
    }
}

pub async fn create_for(
    ctl: &mut ControllerClient<Channel>,
    name: &str,
    parameters: HashMap<String, String>,
    topology: Option<csi::TopologyRequirement>,
) -> Result<csi::Volume, tonic::Status> {
    ctl.create_volume(csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
        }],
        parameters,
        accessibility_requirements: topology,
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().volume.expect("volume"))
}

/// The topology of a pod on the worker beside storage node `node` of `cluster`.
fn beside(cluster: Uuid, node: Uuid) -> csi::TopologyRequirement {
    let t = csi::Topology {
        segments: [(
            format!("simplyblock.io/storage-node-uuid.{cluster}.0"),
            node.to_string(),
        )]
        .into_iter()
        .collect(),
    };
    csi::TopologyRequirement {
        requisite: vec![t.clone()],
        preferred: vec![t],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_claim_control_reaches_the_volume_create() {
    let e = ClaimEnv::start().await;
    let (_, mut ctl, _) = e.driver.clients().await;
    let nodes = e
        .sim
        .client
        .list_storage_nodes(e.sim.cluster)
        .await
        .expect("nodes");
    assert_eq!(nodes.len(), 3);
    let (n0, n1, n2) = (&nodes[0], &nodes[1], &nodes[2]);

    // The hard pin, an id, QoS overrides (current and legacy spellings) and the group.
    let id = Uuid::from_u128(0x7d4f_11aa_2b3c_4d5e_8f90_a1b2_c3d4_e5f6);
    e.claim(
        "pinned",
        &[
            (
                "storage.simplyblock.io/selected-storage-node",
                &n2.id.to_string(),
            ),
            ("simplyblock.io/lvol-id", &id.to_string()),
            ("simplyblock.io/qos-rw-iops", "1234"),
            ("simplybk/qos-w-mbytes", "56"),
        ],
        &[("storage.simplyblock.io/consistency-group", "claims-db")],
    )
    .await;
    let v = e.create(&mut ctl, "pinned", None).await.expect("pinned");
    let got = e.volume(&v.volume_id).await;
    assert_eq!(got.id, id, "the claim's lvol-id");
    assert_eq!(got.storage_node_id, n2.id, "the selected storage node");
    assert_eq!((got.max_rw_iops, got.max_w_mbytes), (1234, 56));
    let group = e
        .sim
        .client
        .find_consistency_group(e.sim.cluster, "claims-db")
        .await
        .expect("groups")
        .expect("the claim's consistency group");
    let members = e
        .sim
        .client
        .consistency_group_members(e.sim.cluster, group.id)
        .await
        .expect("members");
    assert_eq!(
        members.iter().map(|m| m.lvol_id).collect::<Vec<_>>(),
        vec![id]
    );

    // The one-shot hint, by hostname: applied, then removed from the claim.
    e.claim(
        "hinted",
        &[("simplyblock.io/placement-hint", &n1.hostname)],
        &[],
    )
    .await;
    let v = e.create(&mut ctl, "hinted", None).await.expect("hinted");
    assert_eq!(e.volume(&v.volume_id).await.storage_node_id, n1.id);
    let after = Api::<PersistentVolumeClaim>::namespaced(e.admin.clone(), NAMESPACE)
        .get("hinted")
        .await
        .expect("claim");
    assert!(
        !after
            .metadata
            .annotations
            .unwrap_or_default()
            .contains_key("simplyblock.io/placement-hint"),
        "the hint is removed after the create"
    );

    // The legacy pin.
    e.claim("legacy", &[("simplybk/host-id", &n1.id.to_string())], &[])
        .await;
    let v = e.create(&mut ctl, "legacy", None).await.expect("legacy");
    assert_eq!(e.volume(&v.volume_id).await.storage_node_id, n1.id);

    // n0 holds no volume now, so the control plane's own choice is n0: landing on n1
    // beside the pod is the affinity's doing, and opting out lands on n0.
    e.claim(
        "beside-pod",
        &[("simplyblock.io/pod-affinity", "true")],
        &[],
    )
    .await;
    let v = e
        .create(&mut ctl, "beside-pod", Some(beside(e.sim.cluster, n1.id)))
        .await
        .expect("beside the pod");
    assert_eq!(e.volume(&v.volume_id).await.storage_node_id, n1.id);
    e.claim(
        "opted-out",
        &[("simplyblock.io/pod-affinity", "false")],
        &[],
    )
    .await;
    let v = e
        .create(&mut ctl, "opted-out", Some(beside(e.sim.cluster, n1.id)))
        .await
        .expect("opted out");
    assert_eq!(e.volume(&v.volume_id).await.storage_node_id, n0.id);
    assert!(
        e.events_on("pinned").await.is_empty(),
        "no refusal recorded"
    );
    e.driver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_control_fails_the_create_with_an_event_on_the_claim() {
    let e = ClaimEnv::start().await;
    let (_, mut ctl, _) = e.driver.clients().await;

    e.claim(
        "bad-values",
        &[
            ("simplyblock.io/lvol-id", "not-a-uuid"),
            ("simplyblock.io/qos-rw-iops", "-1"),
            ("simplyblock.io/pod-affinity", "maybe"),
        ],
        &[],
    )
    .await;
    let err = e
        .create(&mut ctl, "bad-values", None)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    for key in ["lvol-id", "qos-rw-iops", "pod-affinity"] {
        assert!(err.message().contains(key), "{key}: {}", err.message());
    }
    let events = e.events_on("bad-values").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].reason.as_deref(), Some("ClaimControlRefused"));
    assert_eq!(events[0].type_.as_deref(), Some("Warning"));
    let said = events[0].message.as_deref().expect("message");
    assert!(
        err.message().ends_with(said) && said.contains("lvol-id"),
        "the event says what the error says: {said:?}"
    );

    // A pin naming no storage node of the cluster is refused before the control plane
    // is asked, with the nodes it could name.
    e.claim(
        "ghost-pin",
        &[(
            "storage.simplyblock.io/selected-storage-node",
            "no-such-node",
        )],
        &[],
    )
    .await;
    let err = e
        .create(&mut ctl, "ghost-pin", None)
        .await
        .expect_err("refused");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("no-such-node"), "{}", err.message());
    assert!(err.message().contains("w1"), "the nodes: {}", err.message());
    let events = e.events_on("ghost-pin").await;
    assert_eq!(events.len(), 1, "{events:#?}");

    let vols = e
        .sim
        .client
        .list_volumes(e.sim.cluster, e.sim.pool)
        .await
        .expect("volumes");
    assert!(vols.is_empty(), "nothing was created: {vols:?}");
    e.driver.stop().await;
}
