//! ControlPlane (`cp`): where the simplyblock control plane runs and how to reach it.
//!
//! One per Kubernetes cluster, named `simplyblock`. Either the operator installs it here
//! (`source.local`: FoundationDB, the object store and the management API) or it runs
//! elsewhere and the operator only connects (`source.managed`). Every client of the
//! control plane (the operator's controllers, the CSI driver) finds it at
//! `status.endpoint`.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use simplyblock_statemachine::{Graph, GraphDef, StateDef, StepSnapshot, state_enum};

/// The one name a ControlPlane may have.
pub const SINGLETON_NAME: &str = "simplyblock";

/// A fully qualified image reference, `<registry>[:<port>]/<path>` with a tag, a digest or
/// both (`:<tag>@sha256:<digest>`), unanchored: [`IMAGE_PATTERN`] and
/// [`OPTIONAL_IMAGE_PATTERN`] are made of it.
macro_rules! image_reference {
    () => {
        r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(@sha256:[a-f0-9]{64})?|@sha256:[a-f0-9]{64})"
    };
}

/// The pattern of every image field: a full reference. Which registries a cluster accepts
/// is not the schema's to say: the chart's admission policy holds the list (its value
/// `allowedRegistries`), so a mirror needs no new CRDs.
pub const IMAGE_PATTERN: &str = concat!("^", image_reference!(), "$");

/// [`IMAGE_PATTERN`] or the empty string (an image left to its default).
pub const OPTIONAL_IMAGE_PATTERN: &str = concat!("^($|", image_reference!(), ")$");

/// Where the control plane runs and how the operator reaches it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "storage.simplyblock.io",
    version = "v1alpha2",
    kind = "ControlPlane",
    plural = "controlplanes",
    namespaced,
    status = "ControlPlaneStatus",
    shortname = "cp",
    category = "simplyblock",
    doc = "The simplyblock control plane: installed here by the operator (spec.source.local) or running elsewhere (spec.source.managed). One per Kubernetes cluster, named simplyblock; status.endpoint is where every client finds it.",
    validation = Rule::new("self.metadata.name == 'simplyblock'").message(
        "a ControlPlane must be named simplyblock: there is one per Kubernetes cluster"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Step", type_ = "string", json_path = ".status.step.state"),
    printcolumn(name = "Endpoint", type_ = "string", json_path = ".status.endpoint"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.message",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneSpec {
    /// Where the control plane comes from. Which of the two is chosen cannot change; the
    /// fields inside it can.
    pub source: Source,
}

/// Exactly one of `local` and `managed`.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.local) ? 1 : 0) + (has(self.managed) ? 1 : 0) == 1").message(
    "set exactly one of spec.source.local (the operator installs the control plane here) or spec.source.managed (it runs elsewhere)"
))]
#[x_kube(validation = Rule::new("has(self.local) == has(oldSelf.local) && has(self.managed) == has(oldSelf.managed)").message(
    "spec.source is immutable between local and managed: delete the ControlPlane and create it again to change where the control plane runs"
))]
pub struct Source {
    /// Install the control plane in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local: Option<LocalSource>,
    /// Connect to a control plane that runs elsewhere; nothing is installed here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed: Option<ManagedSource>,
}

impl Source {
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }
}

/// A control plane the operator installs and keeps running here.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalSource {
    /// The management API's image (from a registry the chart allows); a ControlPlaneOps
    /// Upgrade changes it.
    #[schemars(regex(pattern = IMAGE_PATTERN))]
    pub image: String,
    /// When the kubelet pulls the image.
    #[serde(default = "if_not_present")]
    pub image_pull_policy: String,
    /// Secrets (in this namespace) the kubelet pulls the control plane's images with: a
    /// private registry or mirror.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// How many replicas of the management API run.
    #[serde(default = "two")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// The FoundationDB cluster the control plane stores its state in.
    #[serde(default)]
    #[serde(rename = "foundationDB")]
    pub foundation_db: FoundationDb,
    /// Resources of the management API's container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Tolerations of the control plane's pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node selector of the control plane's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// TLS of the management API and of its clients.
    #[serde(default)]
    pub tls: LocalTls,
}

fn if_not_present() -> String {
    "IfNotPresent".into()
}

fn two() -> i32 {
    2
}

fn three() -> i32 {
    3
}

fn yes() -> bool {
    true
}

/// The FoundationDB cluster of a local control plane.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDb {
    /// How many storage processes; the coordinators are chosen among them.
    #[serde(default = "three")]
    #[schemars(range(min = 1))]
    pub replicas: i32,
    /// The StorageClass of FoundationDB's volumes; the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Resources of each FoundationDB process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

impl Default for FoundationDb {
    fn default() -> Self {
        FoundationDb {
            replicas: three(),
            storage_class_name: None,
            resources: None,
        }
    }
}

/// TLS of a local control plane. An unset flag reads as on.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LocalTls {
    /// Serve the management API over TLS.
    #[serde(default = "yes", rename = "enableTLS")]
    pub enable_tls: bool,
    /// Also require client certificates; ignored when TLS is off.
    #[serde(default = "yes", rename = "enableMutualTLS")]
    pub enable_mutual_tls: bool,
    /// Who issues the serving certificate.
    #[serde(default)]
    pub provider: TlsProvider,
}

impl Default for LocalTls {
    fn default() -> Self {
        LocalTls {
            enable_tls: true,
            enable_mutual_tls: true,
            provider: TlsProvider::default(),
        }
    }
}

/// Who issues a serving certificate.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TlsProvider {
    /// A cert-manager `Certificate` (cert-manager must be installed).
    #[default]
    #[serde(rename = "cert-manager")]
    CertManager,
    /// OpenShift's service CA, by Service annotation.
    OpenShift,
}

/// Refuses a managed endpoint whose host is local (see [`crate::address`]) as far as CEL
/// can tell: the names defined as loopback; a numeric host that is not a canonical a.b.c.d
/// (`127.1`, `2130706433`, `0x7f000001`, `0177.0.0.1`, which `inet_aton` and URL parsers
/// read as addresses); 127/8, 169.254/16 and 0/8; IPv6 literals in `0::/16` (`::1`, `::`,
/// the IPv4-mapped and -compatible forms, where no routable address lies), `fe80::/10` and
/// with a zone. A URL CEL cannot parse is refused too. Only regular expressions over
/// `self` (at most 512 characters): a parsed host has no size CEL can bound, and rules on
/// it exceed the API server's cost budget.
const LOCAL_ENDPOINT_RULE: &str = concat!(
    "isURL(self) && !self.matches('(?i)^https?://([^/?#@]*@)?(",
    // Loopback names.
    "(localhost|[^/?#@:]*[.]localhost|localhost[.]localdomain|ip6-localhost|ip6-loopback)[.]?",
    // Local IPv4, canonical.
    "|(127|0)([.][0-9]+){3}|169[.]254([.][0-9]+){2}",
    // IPv6 in 0::/16, link-local, or zoned.
    "|[[](::|0{1,4}:)[^]]*[]]|[[]fe[89ab][0-9a-f]:[^]]*[]]|[[][^]]*%[^]]*[]]",
    ")([:/?#].*)?$') && ",
    // A numeric host is a canonical a.b.c.d.
    "(!self.matches('(?i)^https?://([^/?#@]*@)?(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+)){0,3}[.]?([:/?#].*)?$') || ",
    "self.matches('^https?://([^/?#@]*@)?(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])([.](25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}([:/?#].*)?$'))",
);

/// A control plane that runs elsewhere.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.endpoint.startsWith('https://') || (has(self.insecure) && self.insecure)").message(
    "spec.source.managed.endpoint must be https://: every request carries the control plane's bearer token; set insecure: true only for a control plane without TLS on a trusted network"
))]
pub struct ManagedSource {
    /// The control plane's URL, `https://host[:port]` (`http://` only with `insecure`);
    /// `/api/v2` is appended. Loopback, link-local and unspecified addresses are refused in
    /// every spelling (`localhost`, `127.1`, `2130706433`, `[::ffff:127.0.0.1]`): they would
    /// reach the operator's own pod or the node's metadata service, not a control plane. An
    /// IPv4 address is written a.b.c.d; the operator also refuses a name that resolves to
    /// such an address.
    #[schemars(
        regex(pattern = r"^https?://[^\s/?#]+(/[^\s?#]*)?$"),
        length(max = 512)
    )]
    #[x_kube(validation = Rule::new(LOCAL_ENDPOINT_RULE).message(
        "spec.source.managed.endpoint must not be a loopback, link-local or unspecified address, nor an IPv4 address spelled other than a.b.c.d: give the control plane's routable address"
    ))]
    pub endpoint: String,
    /// A Secret in this namespace holding the bearer token (key `token`, or `secret`).
    /// Without it the operator sends its own service-account token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,
    /// A Secret in this namespace holding the CA that signed the control plane's serving
    /// certificate (key `ca.crt`, or `tls.crt`). Without it the system's CA store is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_bundle_secret_ref: Option<SecretRef>,
    /// Allow a plain `http://` endpoint: the bearer token travels in cleartext. Off by
    /// default, and never set by the chart unless asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
}

/// A Secret in the object's namespace, by name.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

state_enum! {
    /// The steps of installing a local control plane, in order.
    pub enum InstallStep {
        ApplyingFoundationDB,
        AwaitingFoundationDB,
        ApplyingDatastore,
        ApplyingAPI,
        AwaitingAPI,
    }
}

const MINUTE: u64 = 60;

/// A straight line; AwaitingAPI ends the installation (phase Available).
const INSTALL: GraphDef<'static, InstallStep> = GraphDef::new(
    InstallStep::ApplyingFoundationDB,
    &[
        StateDef::new(InstallStep::ApplyingFoundationDB)
            .to(&[InstallStep::AwaitingFoundationDB])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(InstallStep::AwaitingFoundationDB)
            .to(&[InstallStep::ApplyingDatastore])
            .deadline(Duration::from_secs(45 * MINUTE)),
        StateDef::new(InstallStep::ApplyingDatastore)
            .to(&[InstallStep::ApplyingAPI])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(InstallStep::ApplyingAPI)
            .to(&[InstallStep::AwaitingAPI])
            .deadline(Duration::from_secs(10 * MINUTE)),
        StateDef::new(InstallStep::AwaitingAPI).deadline(Duration::from_secs(20 * MINUTE)),
    ],
);

/// The install graph of a local control plane.
pub static INSTALL_GRAPH: LazyLock<Graph<InstallStep>> =
    LazyLock::new(|| Graph::new(INSTALL).expect("the ControlPlane install graph is valid"));

fn install_step_schema(_: &mut SchemaGenerator) -> Schema {
    StepSnapshot::schema_for_steps(&INSTALL_GRAPH.declared_state_names())
}

/// How the control plane is doing.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ControlPlanePhase {
    /// Being installed (local) or not yet reached once; clients wait.
    #[default]
    Installing,
    /// Answering, every component at its desired count.
    Available,
    /// Answering, but a component is below its desired count; clients proceed.
    Degraded,
    /// Not answering, or an essential component has no ready replica; clients wait.
    Unavailable,
}

impl ControlPlanePhase {
    /// Whether clients of the control plane proceed (Available, Degraded) or hold.
    pub fn serves(self) -> bool {
        matches!(
            self,
            ControlPlanePhase::Available | ControlPlanePhase::Degraded
        )
    }
}

/// One workload of a local control plane.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Component {
    /// The workload's name.
    pub name: String,
    /// Replicas asked for.
    pub desired: i32,
    /// Replicas ready.
    pub ready: i32,
    /// Whether the control plane is unavailable when none of its replicas is ready.
    pub essential: bool,
}

/// What the operator last saw of the control plane.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ControlPlaneStatus {
    /// Installing, Available, Degraded or Unavailable.
    #[serde(default)]
    pub phase: ControlPlanePhase,
    /// The install step of a local control plane; empty once installed.
    #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
    #[schemars(schema_with = "install_step_schema")]
    pub step: StepSnapshot,
    /// The control plane's URL (without `/api/v2`): where every client finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The version the control plane reports; empty while it reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When the control plane was last probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked: Option<Time>,
    /// The workloads of a local control plane and their readiness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub components: Vec<Component>,
    /// The ControlPlaneOps that holds the control plane's lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_ops_ref: Option<String>,
    /// Why the phase is what it is: the control plane's own error text when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready (the control plane is serving), Progressing (being installed, upgraded or scaled) and Degraded (some of its parts are unavailable or it failed). `kubectl wait --for=condition=Ready` waits for the first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
