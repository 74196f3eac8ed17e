//! Dotted paths into JSON objects: `spec.limits.capacity`.

use serde_json::{Map, Value};

/// The value at `path`, if every step is an object holding the next.
pub fn get<'a>(root: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(root, |at, key| at.as_object()?.get(key))
}

/// Removes and returns the value at `path`; parents left empty are removed too, so what is
/// left of a source object is exactly what no rule consumed.
pub fn take(root: &mut Value, path: &str) -> Option<Value> {
    let (parent, key) = match path.rsplit_once('.') {
        Some((parent, key)) => (Some(parent), key),
        None => (None, path),
    };
    let taken = match parent {
        Some(parent) => get_mut(root, parent)?.as_object_mut()?.remove(key),
        None => root.as_object_mut()?.remove(key),
    };
    if let Some(parent) = parent {
        prune_empty_parents(root, parent);
    }
    taken
}

fn get_mut<'a>(root: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    path.split('.')
        .try_fold(root, |at, key| at.as_object_mut()?.get_mut(key))
}

/// Removes the object at `path` and its ancestors while they are empty objects.
fn prune_empty_parents(root: &mut Value, path: &str) {
    let mut at = Some(path);
    while let Some(p) = at {
        if get(root, p).is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
            take_shallow(root, p);
            at = p.rsplit_once('.').map(|(parent, _)| parent);
        } else {
            break;
        }
    }
}

fn take_shallow(root: &mut Value, path: &str) {
    match path.rsplit_once('.') {
        Some((parent, key)) => {
            if let Some(obj) = get_mut(root, parent).and_then(Value::as_object_mut) {
                obj.remove(key);
            }
        }
        None => {
            if let Some(obj) = root.as_object_mut() {
                obj.remove(path);
            }
        }
    }
}

/// Sets `path` to `value`, creating the objects on the way; a non-object on the way is
/// replaced, since the target's schema says an object belongs there.
pub fn set(root: &mut Value, path: &str, value: Value) {
    let mut at = root;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if !at.is_object() {
            *at = Value::Object(Map::new());
        }
        let Some(obj) = at.as_object_mut() else {
            return;
        };
        if keys.peek().is_none() {
            obj.insert(key.to_owned(), value);
            return;
        }
        at = obj
            .entry(key.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

/// Whether a value says nothing: null, an empty string, an empty list or object. Such a
/// value is neither stashed nor carried.
pub fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

/// Drops what says nothing, recursively, so two objects compare by what they say: the
/// identity conversion keeps.
pub fn said(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), said(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(said).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn take_removes_the_parents_it_empties() {
        let mut v = json!({"spec": {"a": {"b": 1}, "c": 2}});
        assert_eq!(take(&mut v, "spec.a.b"), Some(json!(1)));
        assert_eq!(v, json!({"spec": {"c": 2}}));
        assert_eq!(take(&mut v, "spec.c"), Some(json!(2)));
        assert_eq!(v, json!({}));
        assert_eq!(take(&mut v, "spec.c"), None);
    }

    #[test]
    fn set_creates_the_way() {
        let mut v = json!({"spec": {"x": 1}});
        set(&mut v, "spec.kms.vault.baseURL", json!("https://v"));
        assert_eq!(
            v,
            json!({"spec": {"x": 1, "kms": {"vault": {"baseURL": "https://v"}}}})
        );
        assert_eq!(get(&v, "spec.kms.vault.baseURL"), Some(&json!("https://v")));
        assert_eq!(get(&v, "spec.x.y"), None);
    }
}
