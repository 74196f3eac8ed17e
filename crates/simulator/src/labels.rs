//! Worker labels from a real API server: with `--kubeconfig`, sbsim watches Nodes
//! (metadata only) and mirrors each Node's labels onto the fleet worker of the same name
//! (or whose `kubernetes.io/hostname` label matches). Without it, labels come from the
//! fleet file and `/_sim/workers/{host}/labels`, so the control-plane half runs alone.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::{Map, Value};

use crate::error::SimError;
use crate::sim::Sim;

/// Build a client from a kubeconfig file.
pub async fn client(path: &Path) -> Result<Client, SimError> {
    let kc =
        kube::config::Kubeconfig::read_from(path).map_err(|e| SimError::Kube(e.to_string()))?;
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| SimError::Kube(e.to_string()))?;
    Client::try_from(cfg).map_err(|e| SimError::Kube(e.to_string()))
}

fn apply(sim: &Sim, name: &str, labels: Option<&std::collections::BTreeMap<String, String>>) {
    let host_label = labels
        .and_then(|l| l.get("kubernetes.io/hostname"))
        .cloned();
    let workers: Vec<String> = sim.read(|t, _| t.workers.keys().cloned().collect());
    let Some(worker) = workers
        .into_iter()
        .find(|w| w == name || host_label.as_deref() == Some(w.as_str()))
    else {
        return;
    };
    let map: Map<String, Value> = labels
        .map(|l| {
            l.iter()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect()
        })
        .unwrap_or_default();
    if let Err(e) = crate::admin::set_labels(sim, &worker, true, &map) {
        tracing::warn!(worker, error = ?e.note(), "could not mirror Node labels");
    }
}

/// Watch Nodes until the stream ends (it retries on errors with backoff).
pub async fn watch(sim: Arc<Sim>, client: Client) {
    let api: Api<PartialObjectMeta<Node>> = Api::all(client);
    let stream = watcher::watcher(api, watcher::Config::default());
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(n)) | Ok(Event::InitApply(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                apply(&sim, &name, n.metadata.labels.as_ref());
            }
            Ok(Event::Delete(n)) => {
                let name = n.metadata.name.clone().unwrap_or_default();
                apply(&sim, &name, None);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "Node watch failed; retrying"),
        }
    }
}
