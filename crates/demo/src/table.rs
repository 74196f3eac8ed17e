//! Prints a list the way `kubectl get` does, from the server's own Table rendering, so the
//! columns are exactly the CRD's printer columns.

use anyhow::Context;
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Table {
    column_definitions: Vec<Column>,
    #[serde(default)]
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Column {
    name: String,
    #[serde(rename = "type")]
    type_: String,
    #[serde(default)]
    priority: i32,
}

#[derive(Deserialize)]
struct Row {
    cells: Vec<serde_json::Value>,
}

/// Fetches `path` (a collection URL) as a Table and renders its priority-0 columns.
pub async fn get(client: &kube::Client, path: &str) -> anyhow::Result<String> {
    let request = http::Request::get(path)
        .header(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io",
        )
        .body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("listing {path}"))?;
    let table: Table = serde_json::from_str(&text).context("the server's Table")?;
    Ok(render(&table, jiff::Timestamp::now()))
}

fn render(table: &Table, now: jiff::Timestamp) -> String {
    let shown: Vec<usize> = (0..table.column_definitions.len())
        .filter(|&i| table.column_definitions[i].priority == 0)
        .collect();
    if table.rows.is_empty() {
        return "No resources found.\n".to_string();
    }
    let mut grid: Vec<Vec<String>> = vec![
        shown
            .iter()
            .map(|&i| table.column_definitions[i].name.to_uppercase())
            .collect(),
    ];
    for row in &table.rows {
        grid.push(
            shown
                .iter()
                .map(|&i| cell(&table.column_definitions[i], row.cells.get(i), now))
                .collect(),
        );
    }
    let widths: Vec<usize> = (0..shown.len())
        .map(|c| grid.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in grid {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(text, w)| format!("{text:<w$}"))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}

fn cell(column: &Column, value: Option<&serde_json::Value>, now: jiff::Timestamp) -> String {
    match value {
        None | Some(serde_json::Value::Null) => "<none>".into(),
        Some(serde_json::Value::String(s)) if s.is_empty() => "<none>".into(),
        Some(serde_json::Value::String(s)) if column.type_ == "date" => s
            .parse::<jiff::Timestamp>()
            .map(|t| age(now.duration_since(t).as_secs()))
            .unwrap_or_else(|_| s.clone()),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// kubectl's short age: `42s`, `7m`, `3h`, `12d`.
fn age(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_priority_zero_columns_aligned() {
        let table: Table = serde_json::from_value(serde_json::json!({
            "columnDefinitions": [
                {"name": "Name", "type": "string", "priority": 0},
                {"name": "Approved", "type": "boolean", "priority": 0},
                {"name": "Message", "type": "string", "priority": 1},
                {"name": "Age", "type": "date", "priority": 0}
            ],
            "rows": [
                {"cells": ["discovered-initial", false, "hidden", "2026-01-01T00:00:00Z"]},
                {"cells": ["b", true, "", "2025-12-31T23:59:30Z"]}
            ]
        }))
        .expect("table");
        let now: jiff::Timestamp = "2026-01-01T00:03:00Z".parse().expect("ts");
        assert_eq!(
            render(&table, now),
            "NAME                 APPROVED   AGE\n\
             discovered-initial   false      3m\n\
             b                    true       3m\n"
        );
    }

    #[test]
    fn ages_read_like_kubectl() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(119), "119s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 3600), "3h");
        assert_eq!(age(72 * 3600), "3d");
    }
}
