//! Whether an object needs applying, so that a pass over a driver that is already in
//! place writes nothing. Pure.
//!
//! The live object must hold every field of the body (the server adds its defaults and
//! other writers their fields, which this leaves alone, as server-side apply does), and
//! carry the digest of the body last applied: a field dropped from the body is invisible
//! in the live object, but changes the digest.
//!
//! A quantity written in another form than the API server's canonical one (`1000m` for
//! `1`) reads as changed on every pass; the apply is then a no-op on the server.

use serde_json::Value;
use simplyblock_api::keys::APPLIED_DIGEST_ANNOTATION;
use simplyblock_api::names::digest8;

/// Lists whose elements are keyed (by name, mount path, port): other writers may add
/// elements, and order does not matter. Every other list is compared whole.
const KEYED_LISTS: &[&str] = &[
    "containers",
    "initContainers",
    "env",
    "volumes",
    "volumeMounts",
    "ports",
    "ownerReferences",
];

/// `body` with the digest of itself as an annotation.
pub fn stamped(mut body: Value) -> Value {
    let digest = digest8(body.to_string().as_bytes());
    if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(map) = annotations.as_object_mut() {
            map.insert(APPLIED_DIGEST_ANNOTATION.into(), Value::String(digest));
        }
    }
    body
}

/// Whether `live` is what applying `stamped` (a [`stamped`] body) would leave.
pub fn up_to_date(live: &Value, stamped: &Value) -> bool {
    let digest = |v: &Value| v["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION].clone();
    digest(live) == digest(stamped) && covers(live, stamped, None)
}

/// Whether `live` holds every field of `wanted`.
fn covers(live: &Value, wanted: &Value, key: Option<&str>) -> bool {
    match (live, wanted) {
        (Value::Object(live), Value::Object(wanted)) => wanted
            .iter()
            .all(|(k, w)| live.get(k).is_some_and(|l| covers(l, w, Some(k.as_str())))),
        (Value::Array(live), Value::Array(wanted))
            if key.is_some_and(|k| KEYED_LISTS.contains(&k)) =>
        {
            wanted
                .iter()
                .all(|w| live.iter().any(|l| covers(l, w, None)))
        }
        (Value::Array(live), Value::Array(wanted)) => {
            live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| covers(l, w, None))
        }
        (live, wanted) => live == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body() -> Value {
        stamped(json!({
            "metadata": {"name": "n", "labels": {"a": "1"}},
            "spec": {
                "tolerations": [{"operator": "Exists"}],
                "containers": [{"name": "c", "args": ["--x", "--y"],
                                "env": [{"name": "E", "value": "1"}]}],
            }
        }))
    }

    /// `body()` as the API server stores it: defaults, another writer's fields and its own
    /// metadata added.
    fn stored() -> Value {
        let mut live = body();
        live["metadata"]["resourceVersion"] = json!("7");
        live["metadata"]["labels"]["other"] = json!("x");
        live["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        live["spec"]["containers"][0]["env"]
            .as_array_mut()
            .expect("env")
            .insert(0, json!({"name": "THEIRS", "value": "2"}));
        live["spec"]["containers"]
            .as_array_mut()
            .expect("containers")
            .insert(0, json!({"name": "sidecar-of-theirs"}));
        live
    }

    #[test]
    fn what_was_applied_and_defaulted_is_up_to_date() {
        assert!(up_to_date(&stored(), &body()));
    }

    /// A change made to a live object.
    type Change = fn(&mut Value);

    #[test]
    fn a_changed_or_missing_field_is_not() {
        let cases: [(&str, Change); 5] = [
            ("a label changed", |v| {
                v["metadata"]["labels"]["a"] = json!("2")
            }),
            ("an argument reordered", |v| {
                v["spec"]["containers"][1]["args"] = json!(["--y", "--x"])
            }),
            ("a toleration added by someone else", |v| {
                v["spec"]["tolerations"]
                    .as_array_mut()
                    .expect("tolerations")
                    .push(json!({"key": "k"}))
            }),
            ("our env var removed", |v| {
                v["spec"]["containers"][1]["env"]
                    .as_array_mut()
                    .expect("env")
                    .retain(|e| e["name"] != "E")
            }),
            ("the digest lost", |v| {
                v["metadata"]["annotations"] = json!({})
            }),
        ];
        for (what, change) in cases {
            let mut live = stored();
            change(&mut live);
            assert!(!up_to_date(&live, &body()), "{what}");
        }
    }

    #[test]
    fn a_field_dropped_from_the_body_changes_the_digest() {
        let mut smaller = json!({
            "metadata": {"name": "n", "labels": {"a": "1"}},
            "spec": {"containers": [{"name": "c", "args": ["--x", "--y"],
                                     "env": [{"name": "E", "value": "1"}]}]}
        });
        smaller = stamped(smaller);
        // The live object still holds everything the smaller body asks for.
        assert!(!up_to_date(&stored(), &smaller));
        assert_ne!(
            smaller["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION],
            body()["metadata"]["annotations"][APPLIED_DIGEST_ANNOTATION]
        );
    }
}
