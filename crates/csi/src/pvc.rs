//! The claim behind a CreateVolume, on the API server: its annotations and labels are
//! read, a refusal is recorded on it as an event, and the one-shot placement hint is
//! removed once the volume exists.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Event, ObjectReference, PersistentVolumeClaim};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::error::{CsiError, Result};
use crate::handle::DRIVER_NAME;

/// A client of the API server (which prints as nothing more).
#[derive(Clone)]
pub struct ApiServer(pub kube::Client);

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiServer")
    }
}

/// The reason of the event a refused control leaves on the claim.
pub const REFUSED_REASON: &str = "ClaimControlRefused";

/// A claim as CreateVolume needs it.
#[derive(Debug, Clone)]
pub struct Claim {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
}

/// Reads claim `namespace/name`.
pub async fn read(client: &kube::Client, namespace: &str, name: &str) -> Result<Claim> {
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let pvc = api.get(name).await.map_err(|e| match e {
        kube::Error::Api(ref s) if s.code == 404 => CsiError::NotFound(format!(
            "PersistentVolumeClaim {namespace}/{name}, whose annotations set the volume's controls"
        )),
        e => CsiError::Aborted(format!(
            "reading PersistentVolumeClaim {namespace}/{name} for its controls: {e}"
        )),
    })?;
    Ok(Claim {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: pvc.metadata.uid,
        annotations: pvc.metadata.annotations.unwrap_or_default(),
        labels: pvc.metadata.labels.unwrap_or_default(),
    })
}

/// Records a Warning event on the claim; a failure to record is logged, never returned,
/// since the refusal itself reaches the user through the provisioner too.
pub async fn warn(client: &kube::Client, claim: &Claim, reason: &str, message: &str) {
    let now = jiff::Timestamp::now();
    let time = Time(now);
    let event = Event {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}.", claim.name)),
            namespace: Some(claim.namespace.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolumeClaim".into()),
            name: Some(claim.name.clone()),
            namespace: Some(claim.namespace.clone()),
            uid: claim.uid.clone(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        action: Some("CreateVolume".into()),
        reporting_component: Some(DRIVER_NAME.into()),
        reporting_instance: Some(DRIVER_NAME.into()),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some(DRIVER_NAME.into()),
            host: None,
        }),
        first_timestamp: Some(time.clone()),
        last_timestamp: Some(time),
        event_time: Some(MicroTime(now)),
        count: Some(1),
        ..Default::default()
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &claim.namespace);
    if let Err(e) = api.create(&PostParams::default(), &event).await {
        tracing::warn!(claim = %format!("{}/{}", claim.namespace, claim.name), error = %e, "the refusal could not be recorded as an event on the claim");
    }
}

/// Removes annotations `keys` from the claim (a JSON merge patch of nulls).
pub async fn remove_annotations(
    client: &kube::Client,
    claim: &Claim,
    keys: &[String],
) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let nulls: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.clone(), serde_json::Value::Null))
        .collect();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &claim.namespace);
    api.patch(
        &claim.name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": nulls}})),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        CsiError::Aborted(format!(
            "removing {keys:?} from PersistentVolumeClaim {}/{}: {e}",
            claim.namespace, claim.name
        ))
    })
}
