//! The five kinds' objects, their Table form and the discovery documents, built purely from
//! what was read: no I/O here.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use simplyblock_controlplane::CapacityStat;

use super::{GROUP, VERSION};

/// One kind of reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    LogicalVolume,
    StorageCluster,
    StoragePool,
    StorageNode,
    StorageDevice,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::LogicalVolume,
        Kind::StorageCluster,
        Kind::StoragePool,
        Kind::StorageNode,
        Kind::StorageDevice,
    ];

    pub fn kind(self) -> &'static str {
        match self {
            Kind::LogicalVolume => "LogicalVolumeMetrics",
            Kind::StorageCluster => "StorageClusterMetrics",
            Kind::StoragePool => "StoragePoolMetrics",
            Kind::StorageNode => "StorageNodeMetrics",
            Kind::StorageDevice => "StorageDeviceMetrics",
        }
    }

    /// The resource name in URLs and RBAC rules (singular and plural alike).
    pub fn resource(self) -> &'static str {
        match self {
            Kind::LogicalVolume => "logicalvolumemetrics",
            Kind::StorageCluster => "storageclustermetrics",
            Kind::StoragePool => "storagepoolmetrics",
            Kind::StorageNode => "storagenodemetrics",
            Kind::StorageDevice => "storagedevicemetrics",
        }
    }

    pub fn short_name(self) -> &'static str {
        match self {
            Kind::LogicalVolume => "lvm",
            Kind::StorageCluster => "scm",
            Kind::StoragePool => "spm",
            Kind::StorageNode => "snm",
            Kind::StorageDevice => "sdm",
        }
    }

    pub fn from_resource(resource: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.resource() == resource)
    }

    /// What the reading measures, for messages.
    pub fn measures(self) -> &'static str {
        match self {
            Kind::LogicalVolume => "PersistentVolumeClaim",
            Kind::StorageCluster => "StorageCluster",
            Kind::StoragePool => "StoragePool",
            Kind::StorageNode => "StorageNode",
            Kind::StorageDevice => "StorageDevice",
        }
    }

    /// The Table columns: name, type, format, priority, description.
    fn columns(self) -> Vec<(&'static str, &'static str, &'static str, u8, &'static str)> {
        let name = ("Name", "string", "name", 0, "The measured object's name.");
        let total = ("Total", "string", "", 0, "The capacity in bytes.");
        let used = ("Used", "string", "", 0, "The bytes in use.");
        let provisioned = (
            "Provisioned",
            "string",
            "",
            0,
            "The bytes promised to volumes (thin provisioning may exceed Total).",
        );
        let percent = (
            "Used%",
            "integer",
            "",
            0,
            "The control plane's utilization figure, 0 to 100.",
        );
        let sampled = (
            "Sampled",
            "date",
            "",
            0,
            "When the control plane took the sample.",
        );
        match self {
            Kind::StorageNode => vec![
                name,
                ("Worker", "string", "", 0, "The Kubernetes node it runs on."),
                (
                    "Cluster",
                    "string",
                    "",
                    0,
                    "The StorageCluster it belongs to.",
                ),
                total,
                used,
                percent,
                ("Node", "string", "", 1, "The control plane's node id."),
                sampled,
            ],
            Kind::StorageDevice => vec![
                name,
                (
                    "Node",
                    "string",
                    "",
                    0,
                    "The StorageNode holding the drive.",
                ),
                total,
                used,
                percent,
                ("Device", "string", "", 1, "The control plane's device id."),
                sampled,
            ],
            Kind::StoragePool => vec![
                name,
                total,
                used,
                provisioned,
                percent,
                ("Pool", "string", "", 1, "The control plane's pool id."),
            ],
            Kind::StorageCluster => vec![
                name,
                (
                    "Scheme",
                    "string",
                    "",
                    0,
                    "The erasure-coding scheme, data+parity chunks.",
                ),
                total,
                used,
                provisioned,
                percent,
                (
                    "Cluster",
                    "string",
                    "",
                    1,
                    "The control plane's cluster id.",
                ),
                sampled,
            ],
            Kind::LogicalVolume => vec![
                name,
                (
                    "Volume",
                    "string",
                    "",
                    0,
                    "The PersistentVolume bound to the claim.",
                ),
                total,
                used,
                percent,
                (
                    "Volume ID",
                    "string",
                    "",
                    1,
                    "The control plane's volume id.",
                ),
                sampled,
            ],
        }
    }
}

/// What a reading is about: the measured object's identity.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    pub name: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub creation_timestamp: Option<String>,
}

/// One capacity reading with the fields of its kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub kind: Kind,
    pub measured: Measured,
    /// Seconds since the epoch when the control plane sampled it; `None` when it says not.
    pub sampled: Option<i64>,
    /// The kind's own top-level fields (ids, references), in order.
    pub fields: Vec<(&'static str, Value)>,
    pub capacity: CapacityStat,
}

impl Reading {
    /// A reading of `capacity`, or `None` when the control plane holds no sample (it
    /// reports all zeros then, which is not the reading of an empty object).
    pub fn of(
        kind: Kind,
        measured: Measured,
        capacity: &CapacityStat,
        fields: Vec<(&'static str, Value)>,
    ) -> Option<Reading> {
        if *capacity == CapacityStat::default() {
            return None;
        }
        Some(Reading {
            kind,
            measured,
            sampled: (capacity.date > 0).then_some(capacity.date),
            fields,
            capacity: capacity.clone(),
        })
    }

    fn field(&self, name: &str) -> Value {
        self.fields
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or(Value::Null)
    }

    fn timestamp(&self) -> Value {
        self.sampled
            .and_then(|s| jiff::Timestamp::from_second(s).ok())
            .map(|t| Value::String(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
            .unwrap_or(Value::Null)
    }

    fn metadata(&self) -> Value {
        let mut meta = json!({"name": self.measured.name, "namespace": self.measured.namespace});
        if !self.measured.labels.is_empty() {
            meta["labels"] = json!(self.measured.labels);
        }
        if let Some(created) = &self.measured.creation_timestamp {
            meta["creationTimestamp"] = json!(created);
        }
        meta
    }

    /// The object as served.
    pub fn object(&self) -> Value {
        let c = &self.capacity;
        let mut object = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": self.kind.kind(),
            "metadata": self.metadata(),
            "timestamp": self.timestamp(),
        });
        for (name, value) in &self.fields {
            object[*name] = value.clone();
        }
        object["capacity"] = json!({
            "total": quantity(c.size_total),
            "used": quantity(c.size_used),
            "free": quantity(c.size_free),
            "provisioned": quantity(c.size_prov),
            "utilizationPercent": c.size_util.clamp(0, 100),
        });
        object
    }

    /// The cells of its Table row, in the order of its kind's columns.
    fn cells(&self) -> Vec<Value> {
        let c = &self.capacity;
        let name = json!(self.measured.name);
        let total = json!(quantity(c.size_total));
        let used = json!(quantity(c.size_used));
        let provisioned = json!(quantity(c.size_prov));
        let percent = json!(c.size_util.clamp(0, 100));
        let sampled = self.timestamp();
        match self.kind {
            Kind::StorageNode => vec![
                name,
                self.field("workerNode"),
                self.field("storageCluster"),
                total,
                used,
                percent,
                self.field("nodeID"),
                sampled,
            ],
            Kind::StorageDevice => vec![
                name,
                self.field("storageNode"),
                total,
                used,
                percent,
                self.field("deviceID"),
                sampled,
            ],
            Kind::StoragePool => vec![
                name,
                total,
                used,
                provisioned,
                percent,
                self.field("poolID"),
            ],
            Kind::StorageCluster => {
                let scheme = self.field("erasureCoding");
                let scheme = format!(
                    "{}+{}",
                    scheme["dataChunks"].as_u64().unwrap_or(0),
                    scheme["parityChunks"].as_u64().unwrap_or(0)
                );
                vec![
                    name,
                    json!(scheme),
                    total,
                    used,
                    provisioned,
                    percent,
                    self.field("clusterID"),
                    sampled,
                ]
            }
            Kind::LogicalVolume => vec![
                name,
                self.field("persistentVolume"),
                total,
                used,
                percent,
                self.field("volumeID"),
                sampled,
            ],
        }
    }
}

/// `bytes` as a Kubernetes Quantity in the BinarySI canonical form, as a
/// PersistentVolumeClaim's capacity prints: the largest binary suffix that divides it.
pub fn quantity(bytes: i64) -> String {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    if bytes == 0 {
        return "0".into();
    }
    for (i, suffix) in SUFFIXES.iter().enumerate() {
        let unit = 1i64 << (10 * (6 - i));
        if bytes % unit == 0 {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

/// The list object of `readings`.
pub fn list(kind: Kind, readings: &[Reading]) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": format!("{}List", kind.kind()),
        "metadata": {"resourceVersion": ""},
        "items": readings.iter().map(Reading::object).collect::<Vec<_>>(),
    })
}

/// The `meta.k8s.io/v1` Table of `readings`, what `kubectl get` prints; each row carries
/// the object's metadata, as kubectl asks by default.
pub fn table(kind: Kind, readings: &[Reading]) -> Value {
    let columns: Vec<Value> = kind
        .columns()
        .into_iter()
        .map(|(name, type_, format, priority, description)| {
            json!({"name": name, "type": type_, "format": format, "priority": priority,
                   "description": description})
        })
        .collect();
    let rows: Vec<Value> = readings
        .iter()
        .map(|r| {
            json!({
                "cells": r.cells(),
                "object": {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": r.metadata(),
                },
            })
        })
        .collect();
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "Table",
        "metadata": {"resourceVersion": ""},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// Whether an `Accept` header asks for the Table form (`as=Table;v=v1;g=meta.k8s.io`).
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|choice| {
        let params: Vec<&str> = choice.split(';').map(str::trim).collect();
        params.contains(&"as=Table")
            && params.contains(&"v=v1")
            && params.contains(&"g=meta.k8s.io")
    })
}

/// `/apis/metrics.simplyblock.io/v1alpha2`: the five resources, their short names and
/// verbs, so `kubectl get snm` resolves.
pub fn resource_list() -> Value {
    let resources: Vec<Value> = Kind::ALL
        .iter()
        .map(|k| {
            json!({
                "name": k.resource(),
                "singularName": k.resource(),
                "namespaced": true,
                "kind": k.kind(),
                "verbs": ["get", "list"],
                "shortNames": [k.short_name()],
                "categories": ["simplyblock"],
            })
        })
        .collect();
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": format!("{GROUP}/{VERSION}"),
        "resources": resources,
    })
}

fn group() -> Value {
    let version = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"name": GROUP, "versions": [version], "preferredVersion": version})
}

/// `/apis/metrics.simplyblock.io`.
pub fn api_group() -> Value {
    let mut g = group();
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    g
}

/// `/apis`.
pub fn api_group_list() -> Value {
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [group()]})
}

/// A `meta/v1` Status refusing a request.
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    })
}

/// The problems of a field selector: this API selects on `metadata.name` and
/// `metadata.namespace` only, with `=`, `==` or `!=`. Every problem at once.
pub fn field_selector_problems(selector: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let key = term
            .split_once("!=")
            .or_else(|| term.split_once("=="))
            .or_else(|| term.split_once('='))
            .map(|(k, _)| k.trim());
        match key {
            Some("metadata.name" | "metadata.namespace") => {}
            Some(other) => problems.push(format!(
                "{other:?} is not a field this API selects on; use metadata.name or metadata.namespace"
            )),
            None => problems.push(format!(
                "{term:?} is not a field selector term; write field=value, field==value or field!=value"
            )),
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capacity() -> CapacityStat {
        CapacityStat {
            date: 1_700_000_000,
            size_total: 4 << 30,
            size_prov: 6 << 30,
            size_used: 1 << 30,
            size_free: 3 << 30,
            size_util: 25,
        }
    }

    fn node_reading() -> Reading {
        Reading::of(
            Kind::StorageNode,
            Measured {
                name: "sn-1".into(),
                namespace: "ns".into(),
                ..Default::default()
            },
            &capacity(),
            vec![
                ("nodeID", json!("n-1")),
                ("storageCluster", json!("c")),
                ("workerNode", json!("w-1")),
            ],
        )
        .expect("a sample")
    }

    #[test]
    fn quantities_take_the_largest_binary_suffix_that_divides() {
        assert_eq!(quantity(0), "0");
        assert_eq!(quantity(4 << 30), "4Gi");
        assert_eq!(quantity(1536), "1536");
        assert_eq!(quantity(3 << 20), "3Mi");
        assert_eq!(quantity(1 << 40), "1Ti");
    }

    #[test]
    fn no_sample_is_no_reading() {
        assert!(
            Reading::of(
                Kind::StorageNode,
                Measured::default(),
                &CapacityStat::default(),
                vec![]
            )
            .is_none()
        );
    }

    #[test]
    fn a_node_reading_has_its_fields_and_row() {
        let r = node_reading();
        let object = r.object();
        assert_eq!(object["kind"], "StorageNodeMetrics");
        assert_eq!(object["nodeID"], "n-1");
        assert_eq!(object["capacity"]["total"], "4Gi");
        assert_eq!(object["capacity"]["provisioned"], "6Gi");
        assert_eq!(object["capacity"]["utilizationPercent"], 25);
        assert_eq!(object["timestamp"], "2023-11-14T22:13:20Z");
        let t = table(Kind::StorageNode, &[r]);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .expect("columns")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        assert_eq!(
            names,
            [
                "Name", "Worker", "Cluster", "Total", "Used", "Used%", "Node", "Sampled"
            ]
        );
        assert_eq!(t["columnDefinitions"][6]["priority"], 1);
        assert_eq!(
            t["rows"][0]["cells"],
            json!([
                "sn-1",
                "w-1",
                "c",
                "4Gi",
                "1Gi",
                25,
                "n-1",
                "2023-11-14T22:13:20Z"
            ])
        );
    }

    #[test]
    fn kubectl_accept_header_asks_for_a_table() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
    }

    #[test]
    fn field_selectors_name_every_unsupported_field() {
        assert!(field_selector_problems("metadata.name=a,metadata.namespace!=b").is_empty());
        let problems = field_selector_problems("spec.x=1,status.y==2,metadata.name=a");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("spec.x"));
        assert!(problems[1].contains("status.y"));
    }

    #[test]
    fn discovery_lists_every_kind_with_its_short_name() {
        let list = resource_list();
        let shorts: Vec<&str> = list["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .map(|r| r["shortNames"][0].as_str().expect("short"))
            .collect();
        assert_eq!(shorts, ["lvm", "scm", "spm", "snm", "sdm"]);
    }
}
