//! Vocabulary shared by several kinds: the Ops phase, the erasure-coding stripe, schema helpers.

use std::borrow::Cow;

use kube::KubeSchema;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// The progress of any `*Ops` object.
///
/// Pending holds no lock and has issued nothing; Running holds the target's lock and may
/// have issued a side effect; the other three are terminal, and the object stays as the
/// audit record of what was done.
#[derive(Serialize, Deserialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum OpsPhase {
    /// Waiting for its turn: no lock held, nothing issued.
    #[default]
    Pending,
    /// Holds the target's lock; a call may already be in flight.
    Running,
    /// Finished; the target reached the state the action asked for.
    Succeeded,
    /// Finished without reaching it; `status.message` says why.
    Failed,
    /// Stopped on request (`spec.abort`) or because its target disappeared.
    Aborted,
}

impl OpsPhase {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            OpsPhase::Succeeded | OpsPhase::Failed | OpsPhase::Aborted
        )
    }
}

/// The erasure-coding layout: data chunks per stripe and the parity chunks protecting them.
///
/// Only the seven schemes simplyblock supports are accepted. A scheme also needs a minimum
/// number of storage nodes (see [`Stripe::minimum_nodes`]), which cannot be checked here
/// because nodes are objects of their own; the deployment config's validation and the
/// activation gate check it.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "[has(self.dataChunks) ? self.dataChunks : 1, has(self.parityChunks) ? self.parityChunks : 1] in [[1, 0], [1, 1], [2, 1], [4, 1], [1, 2], [2, 2], [4, 2]]"
).message(
    "unsupported erasure-coding scheme: dataChunks+parityChunks must be 1+0, 1+1, 2+1, 4+1, 1+2, 2+2 or 4+2 (an omitted half counts as 1)"
))]
pub struct Stripe {
    /// Data chunks per stripe (ndcs). Omitted counts as 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub data_chunks: Option<i32>,
    /// Parity chunks per stripe (npcs): how many chunk losses a stripe survives. Omitted
    /// counts as 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub parity_chunks: Option<i32>,
}

impl Stripe {
    /// The scheme as the control plane names it, e.g. `2x1`.
    pub fn scheme(&self) -> (i32, i32) {
        (
            self.data_chunks.unwrap_or(1),
            self.parity_chunks.unwrap_or(1),
        )
    }

    /// The fewest storage nodes the scheme may run on: a stripe's width plus one spare per
    /// tolerated failure to rebuild onto. `None` for an unsupported scheme.
    pub fn minimum_nodes(&self) -> Option<u32> {
        match self.scheme() {
            (1, 0) => Some(1),
            (1, 1) => Some(3),
            (2, 1) => Some(4),
            (4, 1) => Some(6),
            (1, 2) => Some(5),
            (2, 2) => Some(6),
            (4, 2) => Some(8),
            _ => None,
        }
    }
}

/// A Kubernetes duration string such as `10m`, `90s` or `1h30m`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(transparent)]
pub struct Duration(pub String);

impl JsonSchema for Duration {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"
        })
    }
}

/// An `*Ops` kind whose operations run over declared step graphs: its action type, its
/// step type, the graphs (one per action) and the action an operation asks for. The
/// operator's runtime restores an operation's machine from these alone.
pub trait OpsKind {
    type Action: simplyblock_statemachine::Action + Send + Sync + 'static;
    type Step: simplyblock_statemachine::State + Send + Sync + 'static;
    /// The kind's graphs, one per action it runs, as declared.
    fn graphs() -> &'static simplyblock_statemachine::MultiGraph<Self::Action, Self::Step>;
    /// The action the operation asks for.
    fn action(&self) -> Self::Action;
    /// `spec.abort`.
    fn abort(&self) -> bool;
    /// The status fields every Ops kind has.
    fn status_core(&self) -> OpsStatusCore;
}

/// The fields of `status` every Ops kind has (each kind's status type declares them with
/// its own `kubectl explain` text, beside its own fields), as the runtime reads and writes
/// them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct OpsStatusCore {
    pub phase: OpsPhase,
    pub step: simplyblock_statemachine::StepSnapshot,
    pub message: Option<String>,
    pub started_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub completed_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

/// `impl OpsKind` for an Ops kind whose `spec.action` picks one of `graphs` and whose
/// status declares the common fields.
macro_rules! ops_kind {
    ($kind:ty: $action:ty, $step:ty, $graphs:path) => {
        impl $crate::common::OpsKind for $kind {
            type Action = $action;
            type Step = $step;
            fn graphs() -> &'static simplyblock_statemachine::MultiGraph<$action, $step> {
                &$graphs
            }
            fn action(&self) -> $action {
                self.spec.action
            }
            fn abort(&self) -> bool {
                self.spec.abort
            }
            fn status_core(&self) -> $crate::common::OpsStatusCore {
                let Some(s) = self.status.as_ref() else {
                    return $crate::common::OpsStatusCore::default();
                };
                $crate::common::OpsStatusCore {
                    phase: s.phase,
                    step: s.step.clone(),
                    message: s.message.clone(),
                    started_at: s.started_at.clone(),
                    completed_at: s.completed_at.clone(),
                    conditions: s.conditions.clone(),
                }
            }
        }
    };
}
pub(crate) use ops_kind;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_nodes_follow_the_stripe_table() {
        let s = |d, p| Stripe {
            data_chunks: d,
            parity_chunks: p,
        };
        assert_eq!(s(Some(1), Some(0)).minimum_nodes(), Some(1));
        // Omitted halves count as 1: 1+1.
        assert_eq!(s(None, None).minimum_nodes(), Some(3));
        assert_eq!(s(Some(2), None).minimum_nodes(), Some(4));
        assert_eq!(s(Some(4), Some(1)).minimum_nodes(), Some(6));
        assert_eq!(s(None, Some(2)).minimum_nodes(), Some(5));
        assert_eq!(s(Some(2), Some(2)).minimum_nodes(), Some(6));
        assert_eq!(s(Some(4), Some(2)).minimum_nodes(), Some(8));
        assert_eq!(s(Some(3), Some(1)).minimum_nodes(), None);
    }

    #[test]
    fn only_three_phases_are_terminal() {
        assert!(!OpsPhase::Pending.is_terminal());
        assert!(!OpsPhase::Running.is_terminal());
        assert!(OpsPhase::Succeeded.is_terminal());
        assert!(OpsPhase::Failed.is_terminal());
        assert!(OpsPhase::Aborted.is_terminal());
    }
}
