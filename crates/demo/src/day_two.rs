//! Day two on the Online cluster, with the volume mounted: a worker cordoned for
//! maintenance (the window the operator opens, runs and closes), then the removal of the
//! storage node that holds the volume, which moves the volume first; the file is read back
//! after each.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, Patch, PatchParams, PostParams};
use simplyblock_api::common::OpsPhase;
use simplyblock_api::storage_node_ops::StorageNodeOpsStatus;
use simplyblock_api::{API_VERSION, StorageNode, StorageNodeOps};
use simplyblock_controlplane::{Client, ClientConfig, Url, Uuid};
use simplyblock_operator::node::maintenance_trigger::window_name;

use crate::{NAMESPACE, TOKEN, step, table, volume};

/// Prints an operation's phase, step and message as they change, until `stop` holds for
/// its status or it ends; returns that status. An operation deleted once seen (a finished
/// maintenance window goes at once) returns as it was last seen.
pub async fn follow_until(
    api: &Api<StorageNodeOps>,
    name: &str,
    stop: impl Fn(&StorageNodeOpsStatus) -> bool,
) -> anyhow::Result<StorageNodeOpsStatus> {
    let started = Instant::now();
    let mut last = String::new();
    let mut seen: Option<StorageNodeOpsStatus> = None;
    loop {
        let s = match api.get_opt(name).await? {
            Some(op) => op.status.unwrap_or_default(),
            None => {
                if let Some(s) = seen {
                    println!("[{:>5.1}s] {name} deleted", started.elapsed().as_secs_f64());
                    return Ok(s);
                }
                StorageNodeOpsStatus::default()
            }
        };
        if s != StorageNodeOpsStatus::default() {
            seen = Some(s.clone());
        }
        let line = format!(
            "{:?}{}{}",
            s.phase,
            s.step
                .state
                .as_deref()
                .map(|x| format!("/{x}"))
                .unwrap_or_default(),
            s.message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        );
        if line != last {
            println!("[{:>5.1}s] {name} {line}", started.elapsed().as_secs_f64());
            last = line;
        }
        if s.phase.is_terminal() || stop(&s) {
            return Ok(s);
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(180),
            "{name} did not get there within 3 minutes; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the control plane reports `node` online.
async fn wait_online(cp: &Client, cluster: Uuid, node: &StorageNode) -> anyhow::Result<String> {
    let id: Uuid = node
        .status
        .as_ref()
        .and_then(|s| s.uuid.as_deref())
        .ok_or_else(|| anyhow::anyhow!("storage node without a control-plane id"))?
        .parse()?;
    let started = Instant::now();
    loop {
        let status = cp.get_storage_node(cluster, id).await?.status;
        if status == simplyblock_controlplane::NodeStatus::Online {
            return Ok(status.to_string());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(60),
            "control-plane node {id} is {status}, not online, a minute after its window closed"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn read_back(file: &Path, greeting: &str, after: &str) -> anyhow::Result<()> {
    let back = std::fs::read_to_string(file)?;
    anyhow::ensure!(back == greeting, "the file changed {after}: {back:?}");
    println!(
        "{after}, {} still reads: {}",
        file.display(),
        back.trim_end()
    );
    Ok(())
}

/// The maintenance window of one worker, then the drained removal of the volume's node.
pub async fn run(
    client: &kube::Client,
    control_plane: &str,
    served: &volume::Served,
    file: &Path,
    greeting: &str,
) -> anyhow::Result<()> {
    let storage_nodes: Api<StorageNode> = Api::namespaced(client.clone(), NAMESPACE);
    let node_ops: Api<StorageNodeOps> = Api::namespaced(client.clone(), NAMESPACE);
    let mut nodes: Vec<StorageNode> = storage_nodes.list(&Default::default()).await?.items;
    nodes.sort_by_key(|n| n.metadata.name.clone());
    let cp = Client::new(ClientConfig::new(Url::parse(control_plane)?, TOKEN))?;
    let handle = &served.volume.volume_id;
    let parts: Vec<&str> = handle.split(':').collect();
    let [cluster, pool, volume_id] = parts[..] else {
        anyhow::bail!("volume id {handle} is not cluster:pool:volume");
    };
    let (cluster, volume_id): (Uuid, Uuid) = (cluster.parse()?, volume_id.parse()?);
    let pool: Uuid = pool.parse()?;
    let holder = cp
        .get_volume(cluster, pool, volume_id)
        .await?
        .storage_node_id;
    let uuid_of = |n: &StorageNode| n.status.as_ref().and_then(|s| s.uuid.clone());
    let holding = nodes
        .iter()
        .find(|n| uuid_of(n) == Some(holder.to_string()))
        .ok_or_else(|| anyhow::anyhow!("no StorageNode is control-plane node {holder}"))?
        .clone();
    let other = nodes
        .iter()
        .rfind(|n| n.metadata.name != holding.metadata.name)
        .ok_or_else(|| anyhow::anyhow!("only one storage node"))?
        .clone();

    // Maintenance: cordon, the window runs to AwaitingHost, uncordon, the window closes.
    let worker = other.spec.worker_node.clone();
    let sn = other.metadata.name.clone().unwrap_or_default();
    step(&format!(
        "cordoning worker {worker} for kernel patching: the operator opens a maintenance window for storage node {sn} (StorageNodeOps HostMaintenance)"
    ));
    let workers: Api<Node> = Api::all(client.clone());
    let cordon = |on: bool| serde_json::json!({"spec": {"unschedulable": on}});
    workers
        .patch(
            &worker,
            &PatchParams::default(),
            &Patch::Merge(cordon(true)),
        )
        .await?;
    println!("\n$ kubectl cordon {worker}");
    let window = window_name(&sn);
    let held = follow_until(&node_ops, &window, |s| {
        s.step.state.as_deref() == Some("AwaitingHost")
    })
    .await?;
    anyhow::ensure!(
        !held.phase.is_terminal(),
        "the maintenance window ended {:?}: {}",
        held.phase,
        held.message.unwrap_or_default()
    );
    let budgets: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAMESPACE);
    let left = budgets.list(&Default::default()).await?.items.len();
    println!(
        "storage node {sn} is offline and its worker may reboot ({left} PodDisruptionBudget(s) left in {NAMESPACE})"
    );
    workers
        .patch(
            &worker,
            &PatchParams::default(),
            &Patch::Merge(cordon(false)),
        )
        .await?;
    println!("\n$ kubectl uncordon {worker}");
    // The window closes (and, finished, is deleted): the node is back online.
    let closed = follow_until(&node_ops, &window, |_| false).await?;
    anyhow::ensure!(
        !matches!(closed.phase, OpsPhase::Failed | OpsPhase::Aborted),
        "the maintenance window ended {:?}: {}",
        closed.phase,
        closed.message.unwrap_or_default()
    );
    let back = wait_online(&cp, cluster, &other).await?;
    println!("storage node {sn} is {back} again");
    if served.mounted {
        read_back(
            file,
            greeting,
            &format!("after the maintenance window on {worker}"),
        )?;
    }

    // The removal: the volume is a PersistentVolume's (as the external provisioner would
    // have created it), so the drain moves it before the control plane removes the node.
    let sn = holding.metadata.name.clone().unwrap_or_default();
    step(&format!(
        "removing storage node {sn}, which holds the volume: the drain moves the volume to a peer first (StorageNodeOps Remove, PersistentVolumeOps Migrate)"
    ));
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pv-demo"},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete",
                 "claimRef": {"namespace": "default", "name": "pvc-demo"},
                 "csi": {"driver": "csi.simplyblock.io", "volumeHandle": handle,
                         "fsType": served.fs_type}},
    }))?;
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &pv)
        .await?;
    let name = format!("{sn}-remove");
    let op: StorageNodeOps = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageNodeOps",
        "metadata": {"name": name},
        "spec": {"nodeRef": sn, "action": "Remove"},
    }))?;
    node_ops.create(&PostParams::default(), &op).await?;
    let done = follow_until(&node_ops, &name, |_| false).await?;
    anyhow::ensure!(
        done.phase == OpsPhase::Succeeded,
        "StorageNodeOps {name} ended {:?}: {}",
        done.phase,
        done.message.unwrap_or_default()
    );
    let drain = done.drain.unwrap_or_default();
    let now_on = cp
        .get_volume(cluster, pool, volume_id)
        .await?
        .storage_node_id;
    let new_home = nodes
        .iter()
        .find(|n| uuid_of(n) == Some(now_on.to_string()))
        .and_then(|n| n.metadata.name.clone())
        .unwrap_or_else(|| now_on.to_string());
    println!(
        "drained: {} of {} volume(s) moved; volume {volume_id} is now on storage node {new_home}; control-plane node {holder} is {}",
        drain.volumes_migrated,
        drain.volumes_total,
        cp.get_storage_node(cluster, holder).await?.status
    );
    println!("\n$ kubectl get storagenodeops -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagenodeops")
        )
        .await?
    );
    if served.mounted {
        read_back(
            file,
            greeting,
            &format!("after storage node {sn} was removed"),
        )?;
    }
    Ok(())
}
