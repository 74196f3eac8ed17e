//! The chart's README.md, generated: a short introduction and a table of every value,
//! with its type and description from `values.schema.json` and its default from
//! `values.yaml`, so the documentation cannot drift from what the chart accepts.

use std::path::PathBuf;

use serde_json::Value;

/// The command that rewrites the README.
pub const COMMAND: &str = "cargo run -p simplyblock-testenv -- chart-readme";

/// The README's path.
pub fn path() -> PathBuf {
    crate::chart::dir().join("README.md")
}

/// The README of the chart's current schema and values.
pub fn generate() -> Result<String, String> {
    let dir = crate::chart::dir();
    let read = |name: &str| {
        let file = dir.join(name);
        std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))
    };
    let schema = serde_json::from_str(&read("values.schema.json")?)
        .map_err(|e| format!("values.schema.json is not JSON: {e}"))?;
    let values = serde_saphyr::from_str(&read("values.yaml")?)
        .map_err(|e| format!("values.yaml is not YAML: {e}"))?;
    render(&schema, &values)
}

/// Writes the README; its path.
pub fn write() -> Result<PathBuf, String> {
    let text = generate()?;
    let path = path();
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// The README for `schema` (values.schema.json) and `values` (values.yaml). Refused, with
/// every such key named, when a key of `values` has no description in `schema`.
pub fn render(schema: &Value, values: &Value) -> Result<String, String> {
    let mut undescribed = Vec::new();
    find_undescribed(schema, values, "", &mut undescribed);
    if !undescribed.is_empty() {
        return Err(format!(
            "these keys of values.yaml have no description in values.schema.json:\n  {}",
            undescribed.join("\n  ")
        ));
    }
    let mut out = format!(
        "<!-- Generated from values.schema.json and values.yaml by `{COMMAND}`. Do not edit. -->\n\n{INTRO}"
    );
    let mut rows = Vec::new();
    collect_rows(schema, Some(values), "", &mut rows);
    for [key, kind, default, description] in rows {
        out.push_str(&format!(
            "| `{key}` | {kind} | {default} | {description} |\n"
        ));
    }
    Ok(out)
}

const INTRO: &str = "# simplyblock-operator

This chart installs the simplyblock operator, which runs simplyblock NVMe/TCP storage on
Kubernetes, together with its CustomResourceDefinitions, permissions, admission webhooks and
admission policies. The profile (`deployment.profile`) decides what else the release
installs:

- `standalone` (the default): the control plane, in this cluster, and the CSI driver.
- `managed`: the CSI driver, connected to a control plane that runs elsewhere
  (`controlplane.managed.endpoint`).
- `empty`: the operator alone; you create the ControlPlane and the SimplyblockDriver.

```sh
helm install simplyblock-operator <chart.tgz> -n simplyblock --create-namespace
```

How to [install](../../../docs/INSTALL.md), [upgrade](../../../docs/UPGRADE.md) and
[uninstall](../../../docs/UNINSTALL.md) it, and what to do when something goes wrong:
[troubleshooting](../../../docs/TROUBLESHOOTING.md).

## Health in Argo CD

Every kind of `storage.simplyblock.io` reports the standard conditions in
`status.conditions`: `Ready` (its healthy steady state; for an `*Ops` kind, that it
succeeded), `Progressing` (being created, rolled, rebalanced, or an operation running) and,
for the entity kinds, `Degraded` (a part lost or failed). `kubectl wait
--for=condition=Ready storagecluster/<name>` waits for any of them. Argo CD reads them with
this health check in its `argocd-cm` ConfigMap:

```yaml
data:
  resource.customizations.health.storage.simplyblock.io_*: |
    hs = {}
    local ready, degraded, progressing
    if obj.status ~= nil and obj.status.conditions ~= nil then
      for _, c in ipairs(obj.status.conditions) do
        if c.type == \"Ready\" then ready = c end
        if c.type == \"Degraded\" then degraded = c end
        if c.type == \"Progressing\" then progressing = c end
      end
    end
    if ready == nil or (ready.observedGeneration or 0) < (obj.metadata.generation or 0) then
      hs.status = \"Progressing\"
      hs.message = \"waiting for the operator to act on the latest change\"
    elseif degraded ~= nil and degraded.status == \"True\" then
      hs.status = \"Degraded\"
      hs.message = degraded.reason .. \": \" .. (degraded.message or \"\")
    elseif ready.status == \"True\" then
      hs.status = \"Healthy\"
      hs.message = ready.message
    elseif ready.reason == \"Failed\" or ready.reason == \"Aborted\" then
      hs.status = \"Degraded\"
      hs.message = ready.reason .. \": \" .. (ready.message or \"\")
    else
      hs.status = \"Progressing\"
      hs.message = ready.reason .. \": \" .. (ready.message or \"\")
    end
    return hs
```

An operation that ended (`Succeeded`, `Failed`, `Aborted`) stays as the record of what was
done; Argo CD shows a failed one as Degraded until it is deleted.

## Values

The chart checks every value against `values.schema.json` and refuses a key it does not
know.

| Key | Type | Default | Description |
|-----|------|---------|-------------|
";

/// The properties of an object schema, sorted by key.
fn properties(schema: &Value) -> Vec<(&String, &Value)> {
    let mut props: Vec<_> = schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .collect();
    props.sort_by_key(|(key, _)| *key);
    props
}

/// The dotted path of `key` under `prefix`.
fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

/// Adds to `out` each key of `values` (and below, where `schema` lists properties) that
/// has no description in `schema`.
fn find_undescribed(schema: &Value, values: &Value, prefix: &str, out: &mut Vec<String>) {
    let Some(values) = values.as_object() else {
        return;
    };
    let mut keys: Vec<_> = values.iter().collect();
    keys.sort_by_key(|(key, _)| *key);
    for (key, value) in keys {
        let path = join(prefix, key);
        let prop = &schema["properties"][key];
        if prop["description"].as_str().is_none_or(str::is_empty) {
            out.push(path.clone());
        }
        if prop.get("properties").is_some() {
            find_undescribed(prop, value, &path, out);
        }
    }
}

/// Adds a row (key, type, default, description) for each property of `schema` that lists
/// no properties of its own; objects that do are flattened into their properties.
fn collect_rows(schema: &Value, values: Option<&Value>, prefix: &str, rows: &mut Vec<[String; 4]>) {
    for (key, prop) in properties(schema) {
        let path = join(prefix, key);
        let value = values.and_then(|v| v.get(key));
        if prop.get("properties").is_some() {
            collect_rows(prop, value, &path, rows);
            continue;
        }
        let kind = match &prop["type"] {
            Value::String(kind) => kind.clone(),
            Value::Array(kinds) => kinds
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" or "),
            _ => String::new(),
        };
        let default = value.map(|v| code(&v.to_string())).unwrap_or_default();
        let description = prop["description"].as_str().unwrap_or_default();
        rows.push([path, kind, default, cell(description)]);
    }
}

/// `text` as inline code in a table cell.
fn code(text: &str) -> String {
    let fence = if text.contains('`') { "``" } else { "`" };
    format!("{fence}{}{fence}", cell(text))
}

/// `text` fit for a table cell: on one line, its pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_chart_readme_is_generated_from_the_schema() {
        let generated = generate().unwrap_or_else(|e| panic!("{e}"));
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            std::fs::write(path(), &generated).expect("write the chart's README");
        }
        let on_disk = std::fs::read_to_string(path()).unwrap_or_default();
        assert!(
            on_disk == generated,
            "the chart's README.md differs from values.schema.json and values.yaml: run \
             `{COMMAND}` (or rerun this test with UPDATE_EXPECT=1)"
        );
    }

    #[test]
    fn every_value_without_a_description_is_named_at_once() {
        let schema = json!({"properties": {
            "a": {"type": "string"},
            "b": {"type": "object", "description": "B.", "properties": {
                "c": {"type": "integer", "description": ""},
                "d": {"type": "boolean", "description": "D."},
            }},
        }});
        let values = json!({"a": "x", "b": {"c": 1, "d": true, "e": 2}, "f": {}});
        let refused = render(&schema, &values).expect_err("undescribed keys");
        for key in ["a", "b.c", "b.e", "f"] {
            assert!(refused.contains(&format!("\n  {key}")), "{key}: {refused}");
        }
        assert!(!refused.contains("b.d"), "{refused}");
    }

    #[test]
    fn objects_are_flattened_and_maps_lists_and_odd_text_fill_one_cell() {
        let schema = json!({"properties": {
            "z": {"type": "array", "description": "A list."},
            "o": {"type": "object", "description": "O.", "properties": {
                "labels": {"type": "object", "description": "A map."},
                "pipe": {"type": ["string", "null"], "description": "a | b,\n  c"},
            }},
        }});
        let values = json!({"z": ["x"], "o": {"labels": {"k": "v"}, "pipe": "|`"}});
        let text = render(&schema, &values).expect("renders");
        let rows: Vec<_> = text.lines().filter(|l| l.starts_with("| `")).collect();
        assert_eq!(
            rows,
            [
                "| `o.labels` | object | `{\"k\":\"v\"}` | A map. |",
                "| `o.pipe` | string or null | ``\"\\|`\"`` | a \\| b, c |",
                "| `z` | array | `[\"x\"]` | A list. |",
            ]
        );
    }
}
