//! A CRD version's structural schema, asked which paths it can hold.

use serde_json::Value;

/// What a schema says of one node.
#[derive(Clone, Copy, Debug)]
pub struct Node<'a>(pub &'a Value);

impl<'a> Node<'a> {
    /// The schema of field `key` of this node, if the node can hold one.
    pub fn child(self, key: &str) -> Option<Node<'a>> {
        let schema = self.0;
        if let Some(child) = schema.get("properties").and_then(|p| p.get(key)) {
            return Some(Node(child));
        }
        if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
            return Some(Node(values));
        }
        self.keeps_unknown().then_some(Node(&Value::Null))
    }

    /// The schema at a dotted path below this node.
    pub fn at(self, path: &str) -> Option<Node<'a>> {
        path.split('.').try_fold(self, |node, key| node.child(key))
    }

    /// Whether the node is a struct: named fields, each with its own schema (as opposed to a
    /// map, a list, a leaf, or a node that keeps anything).
    pub fn is_struct(self) -> bool {
        self.0.get("properties").is_some() && !self.keeps_unknown()
    }

    fn keeps_unknown(self) -> bool {
        self.0
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// The fields a struct node declares.
    pub fn fields(self) -> impl Iterator<Item = (&'a String, Node<'a>)> {
        self.0
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k, Node(v)))
    }

    /// The schema of a list's items.
    pub fn items(self) -> Option<Node<'a>> {
        self.0.get("items").map(Node)
    }

    /// The node's `type`, if it declares one.
    pub fn kind(self) -> Option<&'a str> {
        self.0.get("type").and_then(Value::as_str)
    }

    /// The values an enum node admits.
    pub fn enum_values(self) -> Option<&'a Vec<Value>> {
        self.0.get("enum").and_then(Value::as_array)
    }
}
