//! TestFailover admission, on create. A drill runs as the operator, which may read every
//! claim of every managed cluster and create in any namespace, so a drill must reach only
//! what the person who asked for it may reach. The requester is known only here: the API
//! server is asked, as them (SubjectAccessReviews carrying `request.userInfo`), whether
//! they may `get` the source claim (scope Volume), or the claims of `sourceNamespace`
//! (scope Group; of every namespace when it is absent, as the group's members may be
//! anywhere), and `create` claims in the bubble namespace. A drill onto its source's own
//! cluster is refused: the reference removed in-place drills. Every problem is said at once.
//!
//! The rights are those the hub grants: the drill is created there, and the managed
//! clusters' own RBAC cannot be asked from it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::DynamicObject;
use kube::core::admission::{AdmissionReview, Operation};
use simplyblock_api::test_failover::{FailoverScope, TestFailover};

pub use super::access::Access;
use super::{WebhookContext, typed};

/// The path of the TestFailover webhook.
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-testfailover";
/// Its name in the webhook configuration.
pub const NAME: &str = "vtestfailover.simplyblock.io";

/// The webhook on create only: the spec is immutable (CEL), so what was checked at
/// creation holds for the drill's life.
pub fn create_only(
    webhook: k8s_openapi::api::admissionregistration::v1::ValidatingWebhook,
) -> k8s_openapi::api::admissionregistration::v1::ValidatingWebhook {
    super::answering(webhook, &["CREATE"])
}

/// The rights a drill needs of its requester. `drill` carries its namespace and name.
pub fn needed(drill: &TestFailover) -> Vec<Access> {
    let spec = &drill.spec;
    let source = match spec.scope {
        FailoverScope::Volume => Access {
            verb: "get",
            namespace: spec.source_namespace.clone(),
            name: Some(spec.source_ref.clone()),
            purpose: "the drill reads and clones that claim's volume",
        },
        FailoverScope::Group => Access {
            verb: "get",
            namespace: spec.source_namespace.clone(),
            name: None,
            purpose: "the drill clones the volume of every claim of the group",
        },
    };
    vec![
        source,
        Access {
            verb: "create",
            namespace: Some(drill.bubble_namespace()),
            name: None,
            purpose: "the drill creates the clones' claims there",
        },
    ]
}

/// Whether `drill` may be created, given the rights `denied` to its requester (each with
/// the authorizer's reason, if it gave one). Every problem is said.
pub fn on_create(
    drill: &TestFailover,
    user: &str,
    denied: &[(Access, String)],
) -> Result<(), String> {
    let mut problems = Vec::new();
    let spec = &drill.spec;
    if spec.bubble_cluster == spec.source_cluster {
        problems.push(format!(
            "SameCluster: bubbleCluster {} is the source's own cluster; a drill places its clones on the source's replication target, away from the workload; name the cluster the source replicates to",
            spec.bubble_cluster
        ));
    }
    for (access, reason) in denied {
        problems.push(access.refusal(user, reason, "a drill"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

pub async fn review(
    State(ctx): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        let (Operation::Create, Some(new)) = (&req.operation, req.object.as_ref()) else {
            return Ok(());
        };
        let mut drill = typed::<TestFailover>(new)?;
        if drill.metadata.namespace.is_none() {
            drill.metadata.namespace = req.namespace.clone();
        }
        let name = req.user_info.username.clone().unwrap_or_default();
        let denied = super::access::denied(&ctx.client, &req.user_info, needed(&drill)).await?;
        on_create(&drill, &name, &denied)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drill(spec: serde_json::Value) -> TestFailover {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "TestFailover",
            "metadata": {"name": "drill", "namespace": "dr"},
            "spec": spec,
        }))
        .expect("a drill")
    }

    #[test]
    fn a_volume_drill_needs_its_claim_and_the_bubble() {
        let d = drill(serde_json::json!({"scope": "Volume", "sourceCluster": "a",
            "sourceNamespace": "apps", "sourceRef": "data", "bubbleCluster": "b"}));
        let needs = needed(&d);
        assert_eq!(
            needs.iter().map(Access::describe).collect::<Vec<_>>(),
            [
                "get persistentvolumeclaim data in namespace apps".to_owned(),
                format!(
                    "create persistentvolumeclaims in namespace {}",
                    d.bubble_namespace()
                ),
            ]
        );
        assert!(d.bubble_namespace().starts_with("bubble-drill-"));
    }

    #[test]
    fn a_group_drill_without_a_namespace_needs_every_namespaces_claims() {
        let d = drill(serde_json::json!({"scope": "Group", "sourceCluster": "a",
            "sourceRef": "orders", "bubbleCluster": "b", "bubbleNamespace": "rehearsal"}));
        assert_eq!(
            needed(&d).iter().map(Access::describe).collect::<Vec<_>>(),
            [
                "get persistentvolumeclaims in every namespace",
                "create persistentvolumeclaims in namespace rehearsal"
            ]
        );
    }

    #[test]
    fn every_missing_right_and_a_same_cluster_drill_are_said_at_once() {
        let d = drill(serde_json::json!({"scope": "Volume", "sourceCluster": "a",
            "sourceNamespace": "apps", "sourceRef": "data", "bubbleCluster": "a",
            "bubbleNamespace": "rehearsal"}));
        let denied: Vec<(Access, String)> =
            needed(&d).into_iter().map(|a| (a, String::new())).collect();
        let message = on_create(&d, "alice", &denied).expect_err("refused");
        assert!(
            message.contains("SameCluster: bubbleCluster a"),
            "{message}"
        );
        assert!(
            message.contains("alice may not get persistentvolumeclaim data in namespace apps"),
            "{message}"
        );
        assert!(
            message.contains("alice may not create persistentvolumeclaims in namespace rehearsal"),
            "{message}"
        );
        let elsewhere = drill(serde_json::json!({"scope": "Volume", "sourceCluster": "a",
            "sourceNamespace": "apps", "sourceRef": "data", "bubbleCluster": "b"}));
        assert_eq!(on_create(&elsewhere, "alice", &[]), Ok(()));
    }
}
