//! The stored form of a machine: `status.step` on a Kubernetes object.

use std::borrow::Cow;

use jiff::Timestamp;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};

/// `status.step`: the current step's wire name and its deadline.
///
/// Both fields are optional and omitted when unset; an empty snapshot means "not started"
/// (see [`Machine::restore`](crate::Machine::restore)). The deadline serializes as
/// RFC 3339 in UTC (`2026-05-01T12:00:00Z`), the shape of a `metav1.Time`.
///
/// The JSON schema is a plain object with two typed, optional properties and no `$ref`, so it
/// can be embedded in a structural CRD schema. Use
/// [`schema_for_steps`](StepSnapshot::schema_for_steps) to also restrict `state` to a kind's
/// steps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepSnapshot {
    /// The current step's wire name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// When the current step times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
}

/// The message of the CEL rule that [`StepSnapshot::schema_for_steps`] adds.
pub const UNKNOWN_STEP_MESSAGE: &str = "unknown step";

impl StepSnapshot {
    /// Whether nothing is stored; for `skip_serializing_if` on the status field.
    pub fn is_empty(&self) -> bool {
        self.state.as_deref().is_none_or(str::is_empty) && self.deadline.is_none()
    }

    /// This type's schema with `state` restricted to `steps`: an `enum` on the property and
    /// the CEL rule `!has(self.state) || self.state in [...]` (message `unknown step`) on the
    /// object, both listing `steps` in the given order.
    ///
    /// The enum gives `kubectl explain` and clients the list; the CEL rule keeps the message
    /// the Go operator's CRDs had. Pass
    /// [`MultiGraph::declared_state_names`](crate::MultiGraph::declared_state_names) so both
    /// come from the graph.
    pub fn schema_for_steps(steps: &[&str]) -> Schema {
        let mut schema = base_schema();
        let enum_values: Vec<serde_json::Value> = steps.iter().map(|&step| step.into()).collect();
        if let Some(state) = schema
            .as_object_mut()
            .and_then(|object| object.get_mut("properties"))
            .and_then(|properties| properties.get_mut("state"))
            .and_then(serde_json::Value::as_object_mut)
        {
            state.insert("enum".to_owned(), enum_values.into());
        }
        schema.insert(
            "x-kubernetes-validations".to_owned(),
            serde_json::json!([{
                "rule": cel_step_rule(steps),
                "message": UNKNOWN_STEP_MESSAGE,
            }]),
        );
        schema
    }
}

/// The CEL rule that allows exactly `steps` (or no step) in `status.step.state`.
pub fn cel_step_rule(steps: &[&str]) -> String {
    let quoted: Vec<String> = steps.iter().map(|step| format!("'{step}'")).collect();
    format!("!has(self.state) || self.state in [{}]", quoted.join(", "))
}

fn base_schema() -> Schema {
    json_schema!({
        "type": "object",
        "description": "The current step and when it times out.",
        "properties": {
            "state": {
                "type": "string",
                "description": "The current step. Absent before the first step starts."
            },
            "deadline": {
                "type": "string",
                "format": "date-time",
                "description": "When the current step times out (RFC 3339). Absent for a step without a time budget."
            }
        }
    })
}

impl JsonSchema for StepSnapshot {
    // Inline: a `$ref` is not allowed in a CRD schema.
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "StepSnapshot".into()
    }

    fn schema_id() -> Cow<'static, str> {
        concat!(module_path!(), "::StepSnapshot").into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        base_schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ts(text: &str) -> Timestamp {
        text.parse().expect("valid timestamp")
    }

    #[test]
    fn serializes_like_the_go_kube_snapshot() {
        let full = StepSnapshot {
            state: Some("Awaiting".into()),
            deadline: Some(ts("2026-05-01T12:00:00Z")),
        };
        assert_eq!(
            serde_json::to_value(&full).expect("serializes"),
            json!({"state": "Awaiting", "deadline": "2026-05-01T12:00:00Z"})
        );
        assert_eq!(
            serde_json::to_value(StepSnapshot::default()).expect("serializes"),
            json!({})
        );
    }

    #[test]
    fn deserializes_what_the_api_server_may_hold() {
        let parse = |value: serde_json::Value| {
            serde_json::from_value::<StepSnapshot>(value).expect("deserializes")
        };
        assert_eq!(parse(json!({})), StepSnapshot::default());
        assert_eq!(
            parse(json!({"state": null, "deadline": null})),
            StepSnapshot::default()
        );
        // metav1.Time written with an offset by another client.
        assert_eq!(
            parse(json!({"state": "Starting", "deadline": "2026-05-01T14:00:00+02:00"})),
            StepSnapshot {
                state: Some("Starting".into()),
                deadline: Some(ts("2026-05-01T12:00:00Z")),
            }
        );
        // Fields this version does not know (the Go operator's `claim`) are ignored.
        assert_eq!(
            parse(json!({"state": "Awaiting", "claim": {"attempt": 1}}))
                .state
                .as_deref(),
            Some("Awaiting")
        );
    }

    #[test]
    fn is_empty_treats_an_empty_state_as_none() {
        assert!(StepSnapshot::default().is_empty());
        assert!(
            StepSnapshot {
                state: Some(String::new()),
                deadline: None
            }
            .is_empty()
        );
        assert!(
            !StepSnapshot {
                state: Some("A".into()),
                deadline: None
            }
            .is_empty()
        );
    }

    #[test]
    fn schema_is_a_plain_structural_object() {
        let schema = schemars::schema_for!(StepSnapshot);
        let mut value = schema.to_value();
        if let Some(object) = value.as_object_mut() {
            object.remove("$schema");
            object.remove("title");
            object.remove("description");
        }
        assert_eq!(
            value,
            json!({
                "type": "object",
                "properties": {
                    "state": {
                        "type": "string",
                        "description": "The current step. Absent before the first step starts."
                    },
                    "deadline": {
                        "type": "string",
                        "format": "date-time",
                        "description": "When the current step times out (RFC 3339). Absent for a step without a time budget."
                    }
                }
            })
        );
    }

    #[test]
    fn embedded_schema_is_inline() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Status {
            #[serde(default)]
            step: StepSnapshot,
        }
        let schema = schemars::schema_for!(Status).to_value();
        assert_eq!(schema.get("$defs"), None, "{schema:#}");
        assert_eq!(
            schema.pointer("/properties/step/type"),
            Some(&json!("object"))
        );
    }

    // The embedding the api crate uses: no Option (an empty snapshot already means "not
    // started"), omitted when empty, the kind's step list from its graphs.
    #[derive(Default, Serialize, Deserialize, JsonSchema)]
    struct OpsStatus {
        #[serde(default, skip_serializing_if = "StepSnapshot::is_empty")]
        #[schemars(schema_with = "ops_step_schema")]
        step: StepSnapshot,
    }

    fn ops_step_schema(_: &mut SchemaGenerator) -> Schema {
        StepSnapshot::schema_for_steps(&["Requesting", "Awaiting"])
    }

    #[test]
    fn embeds_in_a_status_struct() {
        let schema = schemars::schema_for!(OpsStatus).to_value();
        let step = schema.pointer("/properties/step").expect("step property");
        assert_eq!(step.get("type"), Some(&json!("object")));
        assert_eq!(
            step.pointer("/properties/state/enum"),
            Some(&json!(["Requesting", "Awaiting"]))
        );
        assert!(step.get("x-kubernetes-validations").is_some());
        assert_eq!(schema.get("required"), None, "{schema:#}");
        assert_eq!(
            serde_json::to_value(OpsStatus::default()).expect("serializes"),
            json!({})
        );
        let status: OpsStatus = serde_json::from_value(json!({})).expect("deserializes");
        assert!(status.step.is_empty());
    }

    #[test]
    fn schema_for_steps_adds_the_enum_and_the_cel_rule() {
        let schema = StepSnapshot::schema_for_steps(&["Requesting", "Awaiting"]).to_value();
        assert_eq!(
            schema.pointer("/properties/state/enum"),
            Some(&json!(["Requesting", "Awaiting"]))
        );
        assert_eq!(
            schema.get("x-kubernetes-validations"),
            Some(&json!([{
                "rule": "!has(self.state) || self.state in ['Requesting', 'Awaiting']",
                "message": "unknown step"
            }]))
        );
        assert_eq!(
            schema.pointer("/properties/deadline/format"),
            Some(&json!("date-time"))
        );
    }
}
