//! The control plane's cluster-create body, built from a StorageCluster spec. Pure.

use simplyblock_api::quantity::{self, Unit};
use simplyblock_api::storage_cluster::StorageClusterSpec;
use simplyblock_controlplane::{BackupConfig, ClusterCreate, VaultSettings};

/// The S3 credentials read from the Secret `spec.backup.credentialsSecretRef` names.
#[derive(Clone, PartialEq, Eq)]
pub struct BackupCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl std::fmt::Debug for BackupCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackupCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

/// Why the create body cannot be built; the event reason is [`ConfigError::reason`].
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error(
        "minHugePagesSize {0:?} is not a size such as 100G, 1T or a bare number of gigabytes; fix spec.minHugePagesSize"
    )]
    HugePages(String),
    #[error("spec.backup is set but its credentials are missing: {0}")]
    BackupCredentials(String),
}

impl ConfigError {
    pub fn reason(&self) -> &'static str {
        match self {
            ConfigError::HugePages(_) => "InvalidConfig",
            ConfigError::BackupCredentials(_) => "BackupCredentialsError",
        }
    }
}

/// The create body for cluster `name` in `namespace`.
pub fn cluster_create(
    name: &str,
    namespace: &str,
    spec: &StorageClusterSpec,
    backup: Option<&BackupCredentials>,
) -> Result<ClusterCreate, ConfigError> {
    let mut body = ClusterCreate::new(
        name,
        spec.max_subsystem_count.max(0) as u32,
        spec.vcpu_count.max(0) as u32,
    );
    body.cr_name = name.to_string();
    body.cr_namespace = namespace.to_string();
    body.cr_plural = "storageclusters".into();
    let (ndcs, npcs) = spec.stripe.clone().unwrap_or_default().scheme();
    body.distr_ndcs = ndcs.max(0) as u32;
    body.distr_npcs = npcs.max(0) as u32;
    body.enable_node_affinity = spec.enable_node_affinity.unwrap_or(false);
    body.enable_failure_domain = spec.enable_failure_domains.unwrap_or(false);
    body.sync_replication = spec.enable_sync_replication.unwrap_or(false);
    if let Some(fabric) = spec.fabric_type.as_deref().filter(|f| !f.is_empty()) {
        body.fabric = fabric.to_string();
    }
    body.client_data_nic = spec.client_data_ifname.clone().unwrap_or_default();
    body.nvmf_base_port = port(spec.nvmf_base_port);
    body.rpc_base_port = port(spec.rpc_base_port);
    body.snode_api_port = port(spec.snode_api_port);
    if let Some(t) = &spec.warning_threshold {
        body.cap_warn = percent(t.capacity);
        body.prov_cap_warn = percent(t.provisioned_capacity);
    }
    if let Some(t) = &spec.critical_threshold {
        body.cap_crit = percent(t.capacity);
        body.prov_cap_crit = percent(t.provisioned_capacity);
    }
    if let Some(size) = spec
        .min_huge_pages_size
        .as_deref()
        .filter(|s| !s.is_empty())
    {
        // Read as the control plane reads the same field (100G is 10^9 bytes each), but
        // a bare number is gigabytes, as the field documents.
        body.hugepages_mem = quantity::parse_with_default_unit(size, Unit::G)
            .map_err(|_| ConfigError::HugePages(size.into()))?;
    }
    if let Some(vault) = spec.kms.as_ref().and_then(|k| k.vault.as_ref()) {
        body.hashicorp_vault_settings = Some(VaultSettings {
            base_url: vault.endpoint.clone(),
        });
    }
    if let Some(store) = &spec.backup {
        let creds = backup.ok_or_else(|| {
            ConfigError::BackupCredentials(format!(
                "Secret {} was not read",
                store.credentials_secret_ref.name
            ))
        })?;
        body.backup_config = Some(BackupConfig {
            access_key_id: Some(creds.access_key_id.clone()),
            secret_access_key: Some(creds.secret_access_key.clone().into()),
            local_endpoint: Some(store.endpoint.clone()),
            bucket_name: Some(store.bucket.clone()),
            prefix: store.prefix.clone(),
            region: store.region.clone(),
        });
    }
    Ok(body)
}

fn port(p: i32) -> u16 {
    u16::try_from(p).unwrap_or(0)
}

fn percent(v: Option<i64>) -> u32 {
    v.map(|v| v.clamp(0, i64::from(u32::MAX)) as u32)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> StorageClusterSpec {
        serde_json::from_value(v).expect("spec")
    }

    fn huge_pages(size: &str) -> Result<u64, ConfigError> {
        let s = spec(json!({"maxSubsystemCount": 10, "vcpuCount": 4, "minHugePagesSize": size}));
        cluster_create("sb", "ns", &s, None).map(|body| body.hugepages_mem)
    }

    #[test]
    fn huge_pages_read_as_the_field_documents() {
        // A bare number is gigabytes; the units are the control plane's (G is 10^9).
        assert_eq!(huge_pages("100"), Ok(100_000_000_000));
        assert_eq!(huge_pages("100G"), Ok(100_000_000_000));
        assert_eq!(huge_pages("4Gi"), Ok(4 << 30));
        assert_eq!(huge_pages("1T"), Ok(1_000_000_000_000));
        assert_eq!(huge_pages("512M"), Ok(512_000_000));
        assert_eq!(huge_pages("1.5Gi"), Ok(3 << 29));
        assert_eq!(huge_pages("12X"), Err(ConfigError::HugePages("12X".into())));
        // Empty is unset: the control plane computes the minimum itself.
        assert_eq!(huge_pages(""), Ok(0));
    }

    #[test]
    fn the_body_carries_the_spec() {
        let s = spec(json!({
            "maxSubsystemCount": 12, "vcpuCount": 6, "minHugePagesSize": "8G",
            "stripe": {"dataChunks": 2, "parityChunks": 1},
            "enableFailureDomains": true, "clientDataIfname": "eth1",
            "warningThreshold": {"capacity": 80}, "criticalThreshold": {"capacity": 90},
            "kms": {"vault": {"endpoint": "https://vault.example.com:8200"}}
        }));
        let body = cluster_create("sb", "storage", &s, None).expect("body");
        assert_eq!((body.max_subsys, body.spdk_vcpu_count), (12, 6));
        assert_eq!((body.distr_ndcs, body.distr_npcs), (2, 1));
        assert_eq!(body.hugepages_mem, 8_000_000_000);
        assert_eq!(
            (
                body.cr_name.as_str(),
                body.cr_namespace.as_str(),
                body.cr_plural.as_str()
            ),
            ("sb", "storage", "storageclusters")
        );
        assert!(body.enable_failure_domain);
        assert_eq!(body.client_data_nic, "eth1");
        assert_eq!((body.cap_warn, body.cap_crit), (80, 90));
        assert_eq!(
            (body.nvmf_base_port, body.rpc_base_port, body.snode_api_port),
            (4420, 8080, 50001)
        );
        assert_eq!(
            body.hashicorp_vault_settings.map(|v| v.base_url),
            Some("https://vault.example.com:8200".to_string())
        );
    }

    #[test]
    fn backup_needs_its_credentials_and_never_prints_them() {
        let s = spec(json!({
            "maxSubsystemCount": 10, "vcpuCount": 4,
            "backup": {"endpoint": "https://s3.example.com", "bucket": "b", "prefix": "fleet-a", "region": "eu-central-1", "credentialsSecretRef": {"name": "s3"}}
        }));
        let err = cluster_create("sb", "ns", &s, None).expect_err("no credentials");
        assert_eq!(err.reason(), "BackupCredentialsError");
        let creds = BackupCredentials {
            access_key_id: "AK".into(),
            secret_access_key: "very-secret".into(),
        };
        assert!(!format!("{creds:?}").contains("very-secret"));
        let body = cluster_create("sb", "ns", &s, Some(&creds)).expect("body");
        let backup = body.backup_config.expect("backup");
        assert_eq!(backup.bucket_name.as_deref(), Some("b"));
        assert_eq!(backup.prefix.as_deref(), Some("fleet-a"));
        assert_eq!(backup.region.as_deref(), Some("eu-central-1"));
        assert_eq!(
            backup.secret_access_key.as_ref().map(|k| k.expose()),
            Some("very-secret")
        );
    }

    #[test]
    fn a_bad_huge_page_size_is_invalid_config() {
        let s = spec(json!({"maxSubsystemCount": 10, "vcpuCount": 4, "minHugePagesSize": "lots"}));
        assert_eq!(
            cluster_create("sb", "ns", &s, None)
                .expect_err("bad")
                .reason(),
            "InvalidConfig"
        );
    }
}
