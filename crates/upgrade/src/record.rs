//! The durable record of a run: a ConfigMap in the operator's namespace, written under an
//! optimistic lock, so a killed run resumes where it stopped and two runs never interleave.
//!
//! It records only what reading the cluster cannot tell: which checks already passed (a
//! smoke test leaves no trace) and where the migration's graph stands. Every other
//! position is derived from the cluster by each step's `done`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};

use crate::step::Stage;

/// The ConfigMap's name.
pub const NAME: &str = "simplyblock-upgrade";

/// What a run has recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The stage being run.
    pub stage: String,
    /// The state of the stage's graph (`Validating`, `Transforming`, …, `Completed`).
    pub phase: String,
    /// Steps whose completion is recorded rather than read from the cluster.
    pub completed: BTreeSet<String>,
    /// When the latest run started: written first by every run, which takes the lock.
    pub started: String,
    /// The ConfigMap's resourceVersion this record was read at; `None` before it exists.
    resource_version: Option<String>,
}

impl Record {
    fn from_config_map(map: &ConfigMap) -> Record {
        let data = map.data.clone().unwrap_or_default();
        let field = |k: &str| data.get(k).cloned().unwrap_or_default();
        Record {
            stage: field("stage"),
            phase: field("phase"),
            started: field("started"),
            completed: field("completed")
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect(),
            resource_version: map.metadata.resource_version.clone(),
        }
    }

    fn to_config_map(&self, namespace: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                name: Some(NAME.into()),
                namespace: Some(namespace.into()),
                resource_version: self.resource_version.clone(),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".into(),
                    "simplyblock-upgrade".into(),
                )])),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([
                ("stage".into(), self.stage.clone()),
                ("phase".into(), self.phase.clone()),
                ("started".into(), self.started.clone()),
                (
                    "completed".into(),
                    self.completed
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
            ])),
            ..ConfigMap::default()
        }
    }
}

/// Why the record could not be kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "ConfigMap {NAME} changed under this run: another simplyblock-upgrade is running; wait for it to end, then run again"
    )]
    Contended,
    #[error("reading or writing ConfigMap {NAME}: {0}")]
    Kube(#[from] kube::Error),
}

/// The record in `namespace`, under the lock of the ConfigMap's resourceVersion.
pub struct Store {
    api: Api<ConfigMap>,
    namespace: String,
}

impl Store {
    pub fn new(client: &kube::Client, namespace: &str) -> Store {
        Store {
            api: Api::namespaced(client.clone(), namespace),
            namespace: namespace.into(),
        }
    }

    /// The record, or an empty one for `stage` when none is kept.
    pub async fn load(&self, stage: Stage) -> Result<Record, Error> {
        Ok(match self.api.get_opt(NAME).await? {
            Some(map) => Record::from_config_map(&map),
            None => Record {
                stage: stage.to_string(),
                ..Record::default()
            },
        })
    }

    /// Writes `record` if nobody wrote it since it was read, and takes the new version.
    pub async fn save(&self, record: &mut Record) -> Result<(), Error> {
        let map = record.to_config_map(&self.namespace);
        let written = match record.resource_version {
            None => self.api.create(&PostParams::default(), &map).await,
            Some(_) => self.api.replace(NAME, &PostParams::default(), &map).await,
        };
        match written {
            Ok(map) => {
                record.resource_version = map.metadata.resource_version;
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Contended),
            Err(e) => Err(e.into()),
        }
    }

    /// Deletes the record once its stage is complete, if nobody wrote it since.
    pub async fn finish(&self, record: &Record) -> Result<(), Error> {
        let Some(version) = &record.resource_version else {
            return Ok(());
        };
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                resource_version: Some(version.clone()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(NAME, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Contended),
            Err(e) => Err(e.into()),
        }
    }
}
