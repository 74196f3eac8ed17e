//! Helpers for the step-set agreement test every Ops kind owes: the steps its graphs
//! declare, the CRD's `status.step.state` enum and the CEL rule's list must be the same set.
//!
//! ```
//! use simplyblock_statemachine::testing::{assert_step_list_matches, diff_step_lists};
//! assert_step_list_matches(&["Requesting", "Awaiting"], &["Awaiting", "Requesting"]);
//! let diff = diff_step_lists(&["Requesting", "Awaiting"], &["Requesting", "Waiting"]);
//! assert_eq!(diff.missing, ["Awaiting"]);
//! assert_eq!(diff.extra, ["Waiting"]);
//! ```
//!
//! A kind's test, given its generated CRD as JSON:
//!
//! ```text
//! let crd = serde_json::to_value(StorageClusterOps::crd())?;
//! let step = crd
//!     .pointer("/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/step")
//!     .expect("status.step in the schema");
//! assert_step_schema_matches(&STORAGE_CLUSTER_OPS.declared_state_names(), step);
//! ```

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

/// How a CRD's step list differs from the declared steps. Order does not matter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepListDiff {
    /// Declared by a graph but absent from the CRD: the API server would refuse to store
    /// the step, so the operation would stall there.
    pub missing: Vec<String>,
    /// In the CRD but declared by no graph: a stale or misspelled value.
    pub extra: Vec<String>,
    /// Listed more than once in the CRD.
    pub duplicated: Vec<String>,
}

impl StepListDiff {
    /// Whether the lists agree.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty() && self.duplicated.is_empty()
    }
}

impl fmt::Display for StepListDiff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("the step lists agree");
        }
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!(
                "missing from the CRD (declared by the graphs): {}",
                self.missing.join(", ")
            ));
        }
        if !self.extra.is_empty() {
            parts.push(format!(
                "extra in the CRD (declared by no graph): {}",
                self.extra.join(", ")
            ));
        }
        if !self.duplicated.is_empty() {
            parts.push(format!(
                "listed more than once in the CRD: {}",
                self.duplicated.join(", ")
            ));
        }
        f.write_str(&parts.join("; "))
    }
}

/// Compares the declared steps with a CRD's list, as sets. Each field of the result is
/// sorted.
pub fn diff_step_lists(declared: &[&str], crd_list: &[&str]) -> StepListDiff {
    let declared: BTreeSet<&str> = declared.iter().copied().collect();
    let mut listed = BTreeSet::new();
    let mut duplicated = BTreeSet::new();
    for &step in crd_list {
        if !listed.insert(step) {
            duplicated.insert(step);
        }
    }
    let owned = |set: BTreeSet<&str>| set.into_iter().map(str::to_owned).collect();
    StepListDiff {
        missing: owned(declared.difference(&listed).copied().collect()),
        extra: owned(listed.difference(&declared).copied().collect()),
        duplicated: owned(duplicated),
    }
}

/// Panics with a readable diff unless `crd_list` names exactly the `declared` steps.
#[track_caller]
pub fn assert_step_list_matches(declared: &[&str], crd_list: &[&str]) {
    let diff = diff_step_lists(declared, crd_list);
    assert!(diff.is_empty(), "step lists disagree: {diff}");
}

/// The step names of a CEL rule of the form `... self.state in ['A', 'B']`, or `None` when
/// the rule has no such list.
pub fn cel_step_list(rule: &str) -> Option<Vec<String>> {
    let start = rule.find("self.state in [")? + "self.state in [".len();
    let len = rule[start..].find(']')?;
    let list = rule[start..start + len].trim();
    if list.is_empty() {
        return Some(Vec::new());
    }
    list.split(',')
        .map(|item| {
            let item = item.trim();
            let unquoted = item
                .strip_prefix('\'')
                .and_then(|rest| rest.strip_suffix('\''))
                .or_else(|| {
                    item.strip_prefix('"')
                        .and_then(|rest| rest.strip_suffix('"'))
                })?;
            Some(unquoted.to_owned())
        })
        .collect()
}

/// The two step lists of a `status.step` schema: the `state` property's `enum` and the
/// list of the CEL rule that mentions `self.state in [...]`. `None` where absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepSchemaLists {
    pub enum_values: Option<Vec<String>>,
    pub cel_list: Option<Vec<String>>,
}

/// Reads both lists from a `status.step` schema (a CRD's OpenAPI v3 schema as JSON, or
/// [`StepSnapshot::schema_for_steps`](crate::StepSnapshot::schema_for_steps)).
pub fn step_schema_lists(step_schema: &Value) -> StepSchemaLists {
    let enum_values = step_schema
        .pointer("/properties/state/enum")
        .and_then(Value::as_array)
        .map(|values| {
            values
                .iter()
                .map(|value| {
                    value
                        .as_str()
                        .map_or_else(|| value.to_string(), str::to_owned)
                })
                .collect()
        });
    let cel_list = step_schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|validation| validation.get("rule").and_then(Value::as_str))
        .find_map(cel_step_list);
    StepSchemaLists {
        enum_values,
        cel_list,
    }
}

/// The whole step-set agreement test: the schema of `status.step` has both an enum on
/// `state` and a CEL rule listing the steps, and each names exactly the `declared` steps.
/// Panics with every disagreement found.
#[track_caller]
pub fn assert_step_schema_matches(declared: &[&str], step_schema: &Value) {
    let lists = step_schema_lists(step_schema);
    let mut problems = Vec::new();
    for (what, list) in [
        ("the enum of status.step.state", &lists.enum_values),
        ("the CEL rule on status.step", &lists.cel_list),
    ] {
        match list {
            None => problems.push(format!("{what} is missing")),
            Some(list) => {
                let list: Vec<&str> = list.iter().map(String::as_str).collect();
                let diff = diff_step_lists(declared, &list);
                if !diff.is_empty() {
                    problems.push(format!("{what}: {diff}"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "status.step schema disagrees with the graphs: {}",
        problems.join("; ")
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StepSnapshot;
    use serde_json::json;

    #[test]
    fn equal_sets_in_any_order_agree() {
        let diff = diff_step_lists(&["A", "B", "C"], &["C", "A", "B"]);
        assert!(diff.is_empty());
        assert_eq!(diff.to_string(), "the step lists agree");
    }

    #[test]
    fn diff_reports_missing_extra_and_duplicated() {
        let diff = diff_step_lists(&["A", "B", "C"], &["A", "D", "D", "A"]);
        assert_eq!(
            diff,
            StepListDiff {
                missing: vec!["B".into(), "C".into()],
                extra: vec!["D".into()],
                duplicated: vec!["A".into(), "D".into()],
            }
        );
        assert_eq!(
            diff.to_string(),
            "missing from the CRD (declared by the graphs): B, C; extra in the CRD (declared \
             by no graph): D; listed more than once in the CRD: A, D"
        );
    }

    #[test]
    #[should_panic(
        expected = "step lists disagree: missing from the CRD (declared by the graphs): B"
    )]
    fn assert_panics_with_the_diff() {
        assert_step_list_matches(&["A", "B"], &["A"]);
    }

    #[test]
    fn cel_lists_parse() {
        assert_eq!(
            cel_step_list("!has(self.state) || self.state in ['A', 'B']"),
            Some(vec!["A".to_owned(), "B".to_owned()])
        );
        assert_eq!(
            cel_step_list("self.state in [\"A\",'B' ]"),
            Some(vec!["A".to_owned(), "B".to_owned()])
        );
        assert_eq!(cel_step_list("self.state in []"), Some(vec![]));
        assert_eq!(cel_step_list("self.phase in ['A']"), None);
        assert_eq!(cel_step_list("self.state in [A]"), None);
    }

    #[test]
    fn generated_schema_passes_the_agreement_test() {
        let steps = ["Requesting", "Awaiting"];
        let schema = StepSnapshot::schema_for_steps(&steps).to_value();
        assert_eq!(
            step_schema_lists(&schema),
            StepSchemaLists {
                enum_values: Some(vec!["Requesting".into(), "Awaiting".into()]),
                cel_list: Some(vec!["Requesting".into(), "Awaiting".into()]),
            }
        );
        assert_step_schema_matches(&steps, &schema);
    }

    #[test]
    #[should_panic(expected = "the CEL rule on status.step is missing")]
    fn schema_without_cel_fails_the_agreement_test() {
        let schema = json!({"properties": {"state": {"type": "string", "enum": ["A"]}}});
        assert_step_schema_matches(&["A"], &schema);
    }

    #[test]
    #[should_panic(
        expected = "the enum of status.step.state: extra in the CRD (declared by no graph): B"
    )]
    fn schema_with_a_stale_enum_fails_the_agreement_test() {
        let schema = StepSnapshot::schema_for_steps(&["A"]).to_value();
        let mut schema = schema;
        if let Some(values) = schema.pointer_mut("/properties/state/enum") {
            *values = json!(["A", "B"]);
        }
        assert_step_schema_matches(&["A"], &schema);
    }
}
