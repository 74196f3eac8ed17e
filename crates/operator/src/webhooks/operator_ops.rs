//! OperatorOps admission: a discovery run whose size filter cannot be read is refused at
//! the door, rather than failing minutes later in Writing.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use kube::api::DynamicObject;
use kube::core::admission::AdmissionReview;
use simplyblock_api::operator_ops::OperatorOps;

use super::{WebhookContext, typed};

pub const NAME: &str = "voperatorops.simplyblock.io";
pub const PATH: &str = "/validate-storage-simplyblock-io-v1alpha2-operatorops";

pub async fn review(
    State(_): State<Arc<WebhookContext>>,
    Json(review): Json<AdmissionReview<DynamicObject>>,
) -> Json<AdmissionReview<DynamicObject>> {
    super::answer(review, |req| async move {
        match req.object.as_ref() {
            Some(object) => typed::<OperatorOps>(object).and_then(|op| check(&op)),
            None => Ok(()),
        }
    })
    .await
}

/// The problems of a run's spec that its schema cannot express.
pub fn check(op: &OperatorOps) -> Result<(), String> {
    let range = op
        .spec
        .discover
        .as_ref()
        .and_then(|d| d.device_filter.as_ref())
        .and_then(|f| f.drive_size_range.as_deref());
    match range {
        Some(r) => simplyblock_discovery::size::parse_size_range(r)
            .map(|_| ())
            .map_err(|e| format!("spec.discover.deviceFilter.driveSizeRange: {e}")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(range: &str) -> OperatorOps {
        serde_json::from_value(serde_json::json!({
            "apiVersion": simplyblock_api::API_VERSION, "kind": "OperatorOps",
            "metadata": {"name": "run"},
            "spec": {"action": "Discover", "discover": {"deviceFilter": {"driveSizeRange": range}}}
        }))
        .expect("op")
    }

    #[test]
    fn readable_ranges_pass_and_others_say_why() {
        for ok in ["100G-2T", "500G-", "-2T", "1T"] {
            assert_eq!(check(&op(ok)), Ok(()), "{ok}");
        }
        let err = check(&op("big")).expect_err("unreadable");
        assert!(
            err.starts_with("spec.discover.deviceFilter.driveSizeRange: "),
            "{err}"
        );
        assert!(err.contains("big"), "{err}");
    }
}
