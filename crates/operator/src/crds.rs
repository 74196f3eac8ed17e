//! `simplyblock-operator apply-crds`: what the chart's pre-upgrade hook runs. Helm creates
//! a chart's `crds/` on install and never changes them after, so a release whose schema
//! changed would run against the old one; this applies the CRDs the new chart carries
//! (mounted from a ConfigMap of its `crds/`) before Helm updates anything else.
//!
//! The CRDs are applied server-side under [`MANAGER`], taking over what Helm's create
//! wrote, and leave alone what the operator writes into them at run time (the conversion
//! webhook's CA bundle). Only the group's CRDs are applied: a file of another group is
//! refused.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use simplyblock_api::keys::GROUP;

/// The field manager of the CRDs a chart upgrade applies.
pub const MANAGER: &str = "simplyblock-chart-crds";

/// The CRDs of the `*.yaml` files in `dir`, their conversion webhook in `namespace` (the
/// release's; the files name the default). Every file that is not one of the group's CRDs
/// is named in the error, at once.
pub fn read(dir: &Path, namespace: &str) -> Result<Vec<CustomResourceDefinition>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        // A ConfigMap volume also holds `..data` and its timestamped directory.
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut crds = Vec::new();
    let mut refused = Vec::new();
    for file in files {
        let parsed = std::fs::read_to_string(&file)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                serde_saphyr::from_str::<CustomResourceDefinition>(&text).map_err(|e| e.to_string())
            });
        match parsed {
            Ok(crd) if crd.spec.group == GROUP => crds.push(in_namespace(crd, namespace)),
            Ok(crd) => refused.push(format!(
                "{}: a CRD of group {}, not {GROUP}",
                file.display(),
                crd.spec.group
            )),
            Err(e) => refused.push(format!("{}: not a CRD ({e})", file.display())),
        }
    }
    if !refused.is_empty() {
        return Err(format!(
            "nothing applied: {}; the chart's crds/ holds the group's CRDs alone",
            refused.join("; ")
        ));
    }
    if crds.is_empty() {
        return Err(format!("{} holds no CRD", dir.display()));
    }
    Ok(crds)
}

fn in_namespace(mut crd: CustomResourceDefinition, namespace: &str) -> CustomResourceDefinition {
    if let Some(service) = crd
        .spec
        .conversion
        .as_mut()
        .and_then(|c| c.webhook.as_mut())
        .and_then(|w| w.client_config.as_mut())
        .and_then(|c| c.service.as_mut())
    {
        service.namespace = namespace.to_owned();
    }
    crd
}

/// Applies `crds`, printing each; stops at the first the API server refuses, naming it.
pub async fn apply(client: &kube::Client, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let before = api.get_opt(&name).await?.map(|c| c.metadata.generation);
        let applied = api
            .patch(&name, &params, &Patch::Apply(crd))
            .await
            .map_err(|e| anyhow::anyhow!("applying CustomResourceDefinition {name}: {e}"))?;
        let what = match before {
            None => "created",
            Some(generation) if generation == applied.metadata.generation => "unchanged",
            Some(_) => "updated",
        };
        println!("CustomResourceDefinition {name}: {what}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) {
        std::fs::write(dir.join(name), text).expect("write");
    }

    #[test]
    fn the_charts_crds_are_read_with_their_webhook_in_the_release_namespace() {
        let dir = tempfile::tempdir().expect("dir");
        for crd in simplyblock_api::crds() {
            write(
                dir.path(),
                &simplyblock_api::crd_file_name(&crd),
                &simplyblock_api::crd_yaml(&crd).expect("yaml"),
            );
        }
        let read = read(dir.path(), "storage-team").expect("the CRDs");
        assert_eq!(read.len(), simplyblock_api::crds().len());
        let namespaces: Vec<_> = read
            .iter()
            .filter_map(|c| {
                Some(
                    c.spec
                        .conversion
                        .as_ref()?
                        .webhook
                        .as_ref()?
                        .client_config
                        .as_ref()?
                        .service
                        .as_ref()?
                        .namespace
                        .clone(),
                )
            })
            .collect();
        assert!(!namespaces.is_empty());
        assert!(
            namespaces.iter().all(|n| n == "storage-team"),
            "{namespaces:?}"
        );
    }

    #[test]
    fn a_file_that_is_no_crd_of_the_group_stops_everything_and_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let crd = &simplyblock_api::crds()[0];
        write(
            dir.path(),
            "ours.yaml",
            &simplyblock_api::crd_yaml(crd).expect("yaml"),
        );
        write(
            dir.path(),
            "theirs.yaml",
            &simplyblock_api::crd_yaml(crd)
                .expect("yaml")
                .replace("group: storage.simplyblock.io", "group: example.com"),
        );
        write(dir.path(), "broken.yaml", "kind: [");
        let refused = read(dir.path(), "ns").expect_err("refused");
        assert!(refused.starts_with("nothing applied"), "{refused}");
        assert!(
            refused.contains("theirs.yaml: a CRD of group example.com"),
            "{refused}"
        );
        assert!(refused.contains("broken.yaml: not a CRD"), "{refused}");
    }
}
