//! The backup act: the cluster was created with a backup store (an S3 bucket that sbsim
//! simulates, named in the deployment document before its approval); a
//! StorageBackupPolicy protects the demo's claim, the control plane's backup service takes
//! its scheduled backup into the store, the file is overwritten, and a StorageBackupOps
//! Restore brings the backup back as a new claim, whose file reads the original.
//!
//! Stand-ins: the bucket is sbsim's (set up as one sets up MinIO, through its admin route),
//! and the PersistentVolume binder of kube-controller-manager, which this API server runs
//! without, is played by `simplyblock_testenv::standin::prebound_claims`.

use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use simplyblock_api::API_VERSION;
use simplyblock_api::keys::CLAIM_LABEL;
use simplyblock_api::storage_backup::{BackupPhase, StorageBackup};
use simplyblock_api::storage_backup_ops::StorageBackupOps;
use simplyblock_api::storage_backup_policy::{BackupPolicyPhase, StorageBackupPolicy};
use simplyblock_controlplane::{Client, ClientConfig, Method, Url};
use simplyblock_csi::proto::csi::v1 as csi;

use crate::{NAMESPACE, TOKEN, step, table, volume};

/// The store's endpoint (sbsim's simulated S3), its bucket and the Secret of its keys.
pub const ENDPOINT: &str = "http://minio.demo:9000";
pub const BUCKET: &str = "simplyblock-backups";
const SECRET: &str = "backup-store";
const KEY: (&str, &str) = ("AKIDDEMO", "demo-store-secret");
/// The application's claim of the demo's volume (its PersistentVolume is `pv-demo`).
const CLAIM: (&str, &str) = ("default", "pvc-demo");
const POLICY: &str = "demo-every-15m";
const RESTORE: &str = "pvc-demo-restore";
const RESTORED: &str = "pvc-demo-restored";

/// Sets up the bucket in sbsim and the Secret of its keys; returns the document's
/// `spec.cluster.backup`, which names them.
pub async fn store(
    client: &kube::Client,
    control_plane: &str,
) -> anyhow::Result<serde_json::Value> {
    let cp = Client::new(ClientConfig::new(Url::parse(control_plane)?, TOKEN))?;
    let bucket = serde_json::json!({
        "endpoint": ENDPOINT, "bucket": BUCKET,
        "access_key_id": KEY.0, "secret_access_key": KEY.1,
    });
    cp.raw(
        Method::POST,
        "/../../_sim/object-stores",
        &[],
        Some(&bucket),
    )
    .await?;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NAMESPACE},
        "stringData": {"access_key_id": KEY.0, "secret_access_key": KEY.1},
    }))?;
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .patch(
            SECRET,
            &PatchParams::apply("simplyblock-demo").force(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(serde_json::json!({
        "endpoint": ENDPOINT, "bucket": BUCKET, "prefix": "demo",
        "credentialsSecretRef": {"name": SECRET},
    }))
}

/// The act; `served` is the demo's volume, `file` on it.
pub async fn run(
    client: &kube::Client,
    cluster: &str,
    served: &mut volume::Served,
    file: &Path,
) -> anyhow::Result<()> {
    step(&format!(
        "protecting claim {}/{} with a StorageBackupPolicy: a backup every 15 minutes into the cluster's store, four kept",
        CLAIM.0, CLAIM.1
    ));
    let original = served
        .mounted
        .then(|| -> anyhow::Result<String> {
            // What the backup must hold, on the volume before it is taken.
            let text = std::fs::read_to_string(file)?;
            std::fs::File::open(file)?.sync_all()?;
            Ok(text)
        })
        .transpose()?;
    // The application's claim, bound to the volume's PersistentVolume as the PV
    // controller (not run here) would bind it, labelled for the policy.
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": CLAIM.1, "namespace": CLAIM.0, "labels": {"backup": "every-15m"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "",
                 "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv-demo"},
    }))?;
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), CLAIM.0)
        .patch(
            CLAIM.1,
            &PatchParams::apply("simplyblock-demo-backups").force(),
            &Patch::Apply(&claim),
        )
        .await?;
    simplyblock_testenv::ocm::bind(client, CLAIM.0, CLAIM.1).await?;
    let policies: Api<StorageBackupPolicy> = Api::namespaced(client.clone(), NAMESPACE);
    let policy: StorageBackupPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageBackupPolicy",
        "metadata": {"name": POLICY},
        "spec": {"clusterRef": cluster, "schedule": "15m,4",
                 "claimSelector": {"matchLabels": {"backup": "every-15m"}},
                 "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": CLAIM.0}}},
    }))?;
    policies.create(&PostParams::default(), &policy).await?;
    crate::wait_for("the policy Active", Duration::from_secs(60), async || {
        let s = policies.get(POLICY).await.ok()?.status?;
        (s.phase == BackupPolicyPhase::Active && s.attached_claim_count == 1).then_some(())
    })
    .await?;
    println!("\n$ kubectl get storagebackuppolicies -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagebackuppolicies")
        )
        .await?
    );

    step(
        "the control plane's backup service takes the policy's first backup; the operator records it as a StorageBackup",
    );
    let backups: Api<StorageBackup> = Api::namespaced(client.clone(), NAMESPACE);
    let of_claim = ListParams::default().labels(&format!("{CLAIM_LABEL}={}", CLAIM.1));
    let started = Instant::now();
    let backup = crate::wait_for(
        "a backup of the claim Available",
        Duration::from_secs(120),
        async || {
            backups
                .list(&of_claim)
                .await
                .ok()?
                .items
                .into_iter()
                .find(|b| b.phase() == BackupPhase::Available)
        },
    )
    .await?;
    let backup_name = backup.metadata.name.clone().unwrap_or_default();
    println!(
        "[{:>5.1}s] backup {backup_name} is Available",
        started.elapsed().as_secs_f64()
    );
    println!(
        "\n$ kubectl get storagebackups -n {NAMESPACE} -l {CLAIM_LABEL}={}",
        CLAIM.1
    );
    print!(
        "{}",
        table::get(
            client,
            &format!(
                "/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagebackups?labelSelector={CLAIM_LABEL}%3D{}",
                CLAIM.1
            )
        )
        .await?
    );

    if original.is_some() {
        let damage = "overwritten by mistake\n";
        std::fs::write(file, damage)?;
        println!("\n$ echo 'overwritten by mistake' > {}", file.display());
        println!("$ cat {}\n{damage}", file.display());
    }

    step(&format!(
        "restoring backup {backup_name} into a new claim {}/{RESTORED} (StorageBackupOps Restore)",
        CLAIM.0
    ));
    let _binder = simplyblock_testenv::standin::prebound_claims(client.clone());
    let ops: Api<StorageBackupOps> = Api::namespaced(client.clone(), NAMESPACE);
    let op: StorageBackupOps = serde_json::from_value(serde_json::json!({
        "apiVersion": API_VERSION, "kind": "StorageBackupOps",
        "metadata": {"name": RESTORE},
        "spec": {"backupRef": backup_name, "action": "Restore",
                 "restore": {"claimName": RESTORED, "claimNamespace": CLAIM.0}},
    }))?;
    ops.create(&PostParams::default(), &op).await?;
    let started = Instant::now();
    let mut said = String::new();
    let status = loop {
        let status = ops.get(RESTORE).await?.status.unwrap_or_default();
        let now = format!(
            "{:?}/{}: {}",
            status.phase,
            status.step.state.as_deref().unwrap_or("-"),
            status.message.as_deref().unwrap_or("")
        );
        if now != said {
            println!(
                "[{:>5.1}s] {RESTORE} {now}",
                started.elapsed().as_secs_f64()
            );
            said = now;
        }
        if status.phase.is_terminal() {
            break status;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(120),
            "the restore did not end within 120 s: {said}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    anyhow::ensure!(
        status.phase == simplyblock_api::common::OpsPhase::Succeeded,
        "the restore ended {:?}: {}",
        status.phase,
        status.message.unwrap_or_default()
    );
    println!("\n$ kubectl get storagebackupops -n {NAMESPACE}");
    print!(
        "{}",
        table::get(
            client,
            &format!("/apis/{API_VERSION}/namespaces/{NAMESPACE}/storagebackupops")
        )
        .await?
    );
    println!("\n$ kubectl get pvc -n {}", CLAIM.0);
    print!(
        "{}",
        table::get(
            client,
            &format!("/api/v1/namespaces/{}/persistentvolumeclaims", CLAIM.0)
        )
        .await?
    );

    if let Some(original) = original {
        let pv_name = status
            .persistent_volume_name
            .ok_or_else(|| anyhow::anyhow!("the restore names no PersistentVolume"))?;
        let pv = Api::<PersistentVolume>::all(client.clone())
            .get(&pv_name)
            .await?;
        let source = pv
            .spec
            .and_then(|s| s.csi)
            .ok_or_else(|| anyhow::anyhow!("PersistentVolume {pv_name} is not a CSI volume"))?;
        let restored = csi::Volume {
            volume_id: source.volume_handle.clone(),
            volume_context: source
                .volume_attributes
                .unwrap_or_default()
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let back = served.read_from(&restored, RESTORED, name).await?;
        anyhow::ensure!(
            back == original,
            "the restored claim reads something else than the backup was taken of: {back:?}"
        );
        println!(
            "\nmounted claim {}/{RESTORED} beside the damaged one; its {name} reads the original:\n$ cat {name}\n{back}",
            CLAIM.0
        );
        std::fs::write(file, &back)?;
    }
    Ok(())
}
