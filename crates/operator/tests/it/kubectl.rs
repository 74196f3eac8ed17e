//! The real kubectl against the tests' API servers, as a person runs it: `kubectl wait
//! --for=condition=Ready` on any kind, and the check that the conditions it waited for
//! record the generation that is stored.

use std::path::Path;

use kube::Resource;
use kube::api::Api;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use simplyblock_api::conditions::READY;

/// `kubectl wait <condition> <resource>/<name> [-n <ns>]` through `kubeconfig` (`ns` is
/// `None` for a cluster-scoped kind); panics with kubectl's output when it does not succeed
/// within its own timeout.
pub(crate) async fn kubectl_wait_on(
    kubeconfig: &Path,
    ns: Option<&str>,
    resource: &str,
    name: &str,
    condition: &str,
) {
    let kubectl = tokio::task::spawn_blocking(simplyblock_testenv::assets::kubectl)
        .await
        .expect("kubectl task")
        .expect("kubectl");
    let target = format!("{resource}/{name}");
    let mut command = tokio::process::Command::new(kubectl);
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["wait", condition, "--timeout=60s"]);
    if let Some(ns) = ns {
        command.args(["-n", ns]);
    }
    let output = command
        .arg(&target)
        .output()
        .await
        .expect("running kubectl");
    assert!(
        output.status.success(),
        "kubectl wait {condition} {target} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(said.contains("condition met"), "kubectl said {said}");
}

/// `kubectl wait --for=condition=Ready` on `name` through `kubeconfig`, then the object as
/// stored checked: Ready is True and every condition records its `metadata.generation`.
pub(crate) async fn ready_on<K>(kubeconfig: &Path, api: &Api<K>, resource: &str, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let object = api.get(name).await.expect("object");
    let ns = object.meta().namespace.as_deref();
    kubectl_wait_on(kubeconfig, ns, resource, name, "--for=condition=Ready").await;
    let conditions = at_its_generation(api, name).await;
    let ready = conditions
        .iter()
        .find(|c| c["type"] == READY)
        .unwrap_or_else(|| panic!("{name} has no Ready condition: {conditions:?}"));
    assert_eq!(ready["status"], "True", "{name}: {ready}");
}

/// [`ready_on`] through the kubeconfig of the API server the tests share.
pub(crate) async fn ready<K>(api: &Api<K>, resource: &str, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let kubeconfig = crate::support::api_server().await.kubeconfig_path();
    ready_on(kubeconfig, api, resource, name).await;
}

/// `name`'s conditions, each checked to record the generation that is stored.
pub(crate) async fn at_its_generation<K>(api: &Api<K>, name: &str) -> Vec<Value>
where
    K: Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let object = serde_json::to_value(api.get(name).await.expect("object")).expect("json");
    let generation = &object["metadata"]["generation"];
    assert!(generation.is_i64(), "{name} has a generation: {object}");
    let conditions = object["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!conditions.is_empty(), "{name} has conditions: {object}");
    for c in &conditions {
        assert_eq!(
            &c["observedGeneration"], generation,
            "{name}'s {} records the generation acted on",
            c["type"]
        );
    }
    conditions
}
