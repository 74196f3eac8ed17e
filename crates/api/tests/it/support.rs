//! A real API server with the CRDs installed, and helpers to read its refusals.

#![allow(dead_code)]

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::ApiResource;
use kube::{Client, Resource};
use serde_json::Value;
use simplyblock_testenv::TestEnv;
use tokio::sync::OnceCell;

/// A client of the test binary's API server, with every CRD installed, and a namespace of
/// the test's own.
pub async fn namespace(name: &str) -> (Client, String) {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    let env = TestEnv::shared().expect("the test API server starts");
    INSTALLED
        .get_or_init(|| async {
            env.install_crds(&simplyblock_api::crds())
                .await
                .expect("the CRDs install");
        })
        .await;
    let client = env.client().await.expect("a client");
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let object = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
        .expect("a namespace object");
    ns.create(&PostParams::default(), &object)
        .await
        .expect("the test namespace is created");
    (client, name.to_string())
}

/// An untyped API for kind `K`, so tests can send what the typed structs cannot express.
pub fn dynamic<K: Resource<DynamicType = ()>>(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a well-formed object")
}

/// The API server's reasons for refusing a write, one `field: message` per cause, sorted.
/// Panics when the write was accepted.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Vec<String> {
    match result {
        Ok(accepted) => panic!("the API server accepted what it should refuse: {accepted:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "not a validation refusal: {status:?}");
            let mut causes: Vec<String> = status
                .details
                .as_ref()
                .map(|d| {
                    d.causes
                        .iter()
                        .map(|c| format!("{}: {}", c.field, c.message))
                        .collect()
                })
                .unwrap_or_default();
            causes.sort();
            causes
        }
        Err(other) => panic!("the write failed for another reason: {other}"),
    }
}

pub async fn create(api: &Api<DynamicObject>, value: Value) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), &object(value)).await
}

/// Replaces the object with `edit` applied to its current state.
pub async fn update(
    api: &Api<DynamicObject>,
    name: &str,
    edit: impl FnOnce(&mut Value),
) -> Result<DynamicObject, kube::Error> {
    let current = api.get(name).await.expect("the object exists");
    let mut value = serde_json::to_value(&current).expect("serializes");
    edit(&mut value);
    api.replace(name, &PostParams::default(), &object(value))
        .await
}
