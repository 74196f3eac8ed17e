//! `simplyblock-operator uninstall`: what the chart's pre-delete hook runs while the operator
//! still runs, so every finalizer it holds is released before its Deployment goes and
//! `helm uninstall` leaves nothing Terminating.
//!
//! By default it removes the SimplyblockDriver (the CSI driver's workloads) and keeps the
//! data: the ControlPlane (which the chart keeps), the storage clusters and the CRDs stay and
//! go on serving volumes. With `--delete-data` (the chart asks for two values before it
//! passes it) it removes every storage object, then the ControlPlane, then the CRDs.
//!
//! [`next`] decides from what is there now what to do next (pure); [`run`] observes, acts,
//! and waits, so a hook killed half-way and run again picks up where the cluster stands.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::discovery::{ApiResource, Scope};
use simplyblock_api::keys::GROUP;

/// What an uninstall removes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// The SimplyblockDriver alone; the data stays.
    Driver,
    /// Every storage object, the ControlPlane and the CRDs: all data is gone.
    Everything,
}

/// One object of the group as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Present {
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
    /// Deleted already, and held by these finalizers.
    pub terminating: bool,
    pub finalizers: Vec<String>,
}

impl std::fmt::Display for Present {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The order objects go in with [`Removal::Everything`]: the clusters first (their
/// deletion removes their nodes, devices and pools through the operator), then whatever
/// else of the group remains, then the driver, then the control plane the others needed.
const WAVES: [&[&str]; 4] = [
    &["StorageCluster"],
    &[],
    &["SimplyblockDriver"],
    &["ControlPlane"],
];

fn wave_of(kind: &str) -> usize {
    WAVES.iter().position(|w| w.contains(&kind)).unwrap_or(1)
}

/// What to do next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delete these (present, not yet deleted).
    Delete(Vec<Present>),
    /// Wait: these are deleted and held by their finalizers (the operator releases them).
    Wait(Vec<Present>),
    /// Every object is gone: delete the group's CRDs, and be done.
    DeleteCrds,
    Done,
}

/// The next step of `removal` given the group's objects `present`.
pub fn next(removal: Removal, present: &[Present]) -> Step {
    let in_scope: Vec<&Present> = present
        .iter()
        .filter(|p| removal == Removal::Everything || p.kind == "SimplyblockDriver")
        .collect();
    let Some(wave) = in_scope.iter().map(|p| wave_of(&p.kind)).min() else {
        return match removal {
            Removal::Everything => Step::DeleteCrds,
            Removal::Driver => Step::Done,
        };
    };
    let (deleted, standing): (Vec<&Present>, Vec<&Present>) = in_scope
        .into_iter()
        .filter(|p| wave_of(&p.kind) == wave)
        .partition(|p| p.terminating);
    if standing.is_empty() {
        Step::Wait(deleted.into_iter().cloned().collect())
    } else {
        Step::Delete(standing.into_iter().cloned().collect())
    }
}

/// Why an uninstall gave up on `waiting`, and what to do.
pub fn stuck_message(waiting: &[Present], after: Duration) -> String {
    let held: Vec<String> = waiting
        .iter()
        .map(|p| format!("{p} (finalizers: {})", p.finalizers.join(", ")))
        .collect();
    format!(
        "after {}s these are still deleting: {}. Their finalizers are the operator's: check that \
         it runs (kubectl get pods -l app.kubernetes.io/name=simplyblock-operator) and read \
         their conditions and events (kubectl describe); once they are gone, run helm \
         uninstall again. Nothing further is removed until they are",
        after.as_secs(),
        held.join("; ")
    )
}

/// The group's kinds this API server serves.
async fn kinds(client: &kube::Client) -> anyhow::Result<Vec<(ApiResource, Scope)>> {
    let discovery = kube::Discovery::new(client.clone())
        .filter(&[GROUP])
        .run()
        .await?;
    Ok(discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .map(|(r, c)| (r, c.scope))
        .collect())
}

fn api(
    client: &kube::Client,
    resource: &ApiResource,
    scope: &Scope,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    match (scope, ns) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, resource),
        _ => Api::all_with(client.clone(), resource),
    }
}

async fn observe(
    client: &kube::Client,
    kinds: &[(ApiResource, Scope)],
    namespace: Option<&str>,
) -> anyhow::Result<Vec<Present>> {
    let mut present = Vec::new();
    for (resource, scope) in kinds {
        let list = api(client, resource, scope, namespace)
            .list(&ListParams::default())
            .await?;
        present.extend(list.items.into_iter().map(|o| Present {
            kind: resource.kind.clone(),
            namespace: o.metadata.namespace.clone(),
            name: o.metadata.name.clone().unwrap_or_default(),
            terminating: o.metadata.deletion_timestamp.is_some(),
            finalizers: o.metadata.finalizers.clone().unwrap_or_default(),
        }));
    }
    Ok(present)
}

/// Deletes `name` through `api`; one already gone is deleted as far as this is concerned.
async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs `removal` for the objects of `namespace` (every namespace when `None`), checking
/// every `poll`, for at most `timeout`; prints each step.
pub async fn run(
    client: &kube::Client,
    removal: Removal,
    namespace: Option<&str>,
    timeout: Duration,
    poll: Duration,
) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    // Read once: the kinds change only when their CRDs go, the last step. Only what is
    // removed is read: the default hook may read the drivers alone.
    let kinds: Vec<_> = kinds(client)
        .await?
        .into_iter()
        .filter(|(r, _)| removal == Removal::Everything || r.kind == "SimplyblockDriver")
        .collect();
    loop {
        let present = observe(client, &kinds, namespace).await?;
        match next(removal, &present) {
            Step::Done => {
                println!(
                    "done: the CSI driver is removed; the control plane, the storage clusters and the CRDs stay"
                );
                return Ok(());
            }
            Step::DeleteCrds => {
                let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
                for (resource, _) in &kinds {
                    let name = format!("{}.{GROUP}", resource.plural);
                    println!("deleting CustomResourceDefinition {name}");
                    delete(&crds, &name).await?;
                }
                println!("done: every storage object, the control plane and the CRDs are removed");
                return Ok(());
            }
            Step::Delete(objects) => {
                for object in objects {
                    let Some((resource, scope)) = kinds.iter().find(|(r, _)| r.kind == object.kind)
                    else {
                        continue;
                    };
                    println!("deleting {object}");
                    delete(
                        &api(client, resource, scope, object.namespace.as_deref()),
                        &object.name,
                    )
                    .await?;
                }
            }
            Step::Wait(waiting) => {
                if started.elapsed() >= timeout {
                    anyhow::bail!(stuck_message(&waiting, timeout));
                }
                let names: Vec<String> = waiting.iter().map(ToString::to_string).collect();
                println!("waiting for the operator to release {}", names.join(", "));
                tokio::time::sleep(poll).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(kind: &str, name: &str, terminating: bool) -> Present {
        Present {
            kind: kind.into(),
            namespace: Some("simplyblock".into()),
            name: name.into(),
            terminating,
            finalizers: if terminating {
                vec!["storage.simplyblock.io/finalizer".into()]
            } else {
                Vec::new()
            },
        }
    }

    #[test]
    fn by_default_only_the_driver_goes_and_the_data_stays() {
        let present = [
            obj("ControlPlane", "simplyblock", false),
            obj("StorageCluster", "sb", false),
            obj("SimplyblockDriver", "simplyblock", false),
        ];
        assert_eq!(
            next(Removal::Driver, &present),
            Step::Delete(vec![present[2].clone()])
        );
        let deleting = [
            present[0].clone(),
            obj("SimplyblockDriver", "simplyblock", true),
        ];
        assert_eq!(
            next(Removal::Driver, &deleting),
            Step::Wait(vec![deleting[1].clone()])
        );
        assert_eq!(next(Removal::Driver, &present[..2]), Step::Done);
    }

    #[test]
    fn everything_goes_clusters_first_then_the_rest_then_driver_control_plane_and_crds() {
        let mut present = vec![
            obj("ControlPlane", "simplyblock", false),
            obj("SimplyblockDriver", "simplyblock", false),
            obj("StoragePool", "p", false),
            obj("StorageCluster", "sb", false),
        ];
        let order = [
            "StorageCluster",
            "StoragePool",
            "SimplyblockDriver",
            "ControlPlane",
        ];
        for kind in order {
            match next(Removal::Everything, &present) {
                Step::Delete(objects) => {
                    assert_eq!(objects.len(), 1);
                    assert_eq!(objects[0].kind, kind);
                }
                other => panic!("expected {kind} deleted, got {other:?}"),
            }
            // Deleted, held until the operator releases it: nothing later starts.
            for p in present.iter_mut().filter(|p| p.kind == kind) {
                p.terminating = true;
            }
            assert!(matches!(
                next(Removal::Everything, &present),
                Step::Wait(w) if w.iter().all(|p| p.kind == kind)
            ));
            present.retain(|p| p.kind != kind);
        }
        assert_eq!(next(Removal::Everything, &present), Step::DeleteCrds);
    }

    #[test]
    fn a_stuck_deletion_names_what_holds_it_and_what_to_do() {
        let message = stuck_message(
            &[obj("SimplyblockDriver", "simplyblock", true)],
            Duration::from_secs(300),
        );
        assert!(message.contains(
            "SimplyblockDriver simplyblock/simplyblock (finalizers: storage.simplyblock.io/finalizer)"
        ));
        assert!(message.contains("check that it runs"), "{message}");
        assert!(message.contains("Nothing further is removed"), "{message}");
    }
}
