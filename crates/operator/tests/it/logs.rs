//! The operator's JSON logs: a line logged inside a pass of the StorageClusterOps
//! controller (against a real API server and sbsim, the control plane's stand-in) carries
//! the object, its kind, the operation and the step as span fields.

use std::io::Write;
use std::sync::{Arc, Mutex};

use kube::api::PostParams;
use serde_json::{Value, json};
use simplyblock_api::StorageClusterOps;
use simplyblock_api::common::OpsPhase;

use crate::support::harness;

/// Everything the subscriber writes, kept for the test to read.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<Value> {
        let text = String::from_utf8(self.0.lock().expect("log buffer").clone()).expect("utf-8");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

#[tokio::test]
async fn a_line_logged_in_an_ops_pass_carries_the_object_kind_operation_and_step() {
    let h = harness("logs-spans", "", (1, 1)).await;
    let captured = Captured::default();
    let writer = captured.clone();
    // The test's runtime has one thread, so the controller's passes run under this
    // subscriber: the same JSON layer `--log-format json` installs.
    let subscriber = tracing_subscriber::fmt()
        .json()
        .with_env_filter("info,kube=warn,kube_runtime=warn")
        .with_writer(move || writer.clone())
        .finish();
    let _logs = tracing::subscriber::set_default(subscriber);
    let _c = h.start();
    let op: StorageClusterOps = serde_json::from_value(json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "StorageClusterOps",
        "metadata": {"name": "sb-activate"},
        "spec": {"clusterRef": "sb", "action": "Activate"}
    }))
    .expect("op");
    h.ops()
        .create(&PostParams::default(), &op)
        .await
        .expect("created");
    h.phase_is("sb-activate", OpsPhase::Succeeded).await;

    let lines = captured.lines();
    let issuing = lines
        .iter()
        .find(|l| l["fields"]["message"] == "issuing")
        .unwrap_or_else(|| panic!("no line says it issues the call: {lines:#?}"));
    let spans = issuing["spans"].as_array().expect("spans");
    let reconcile = spans
        .iter()
        .find(|s| s["name"] == "reconcile")
        .unwrap_or_else(|| panic!("no reconcile span: {issuing:#}"));
    assert_eq!(reconcile["object"], format!("{}/sb-activate", h.ns));
    assert_eq!(reconcile["kind"], "StorageClusterOps");
    assert_eq!(reconcile["controller"], "storageclusterops");
    let operation = spans
        .iter()
        .find(|s| s["name"] == "operation")
        .unwrap_or_else(|| panic!("no operation span: {issuing:#}"));
    assert_eq!(operation["operation"], "Activate");
    let step = operation["step"].as_str().expect("step");
    assert!(!step.is_empty() && step != "none", "{issuing:#}");
}
