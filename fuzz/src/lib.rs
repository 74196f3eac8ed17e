//! The properties the fuzz targets check, one function each, over the parsers that read
//! what someone else wrote: probe reports and host files, CSI volume and snapshot handles,
//! StorageClass parameters, mountinfo, the control plane's answers and error bodies, and
//! sbsim's fleet files and fault scripts. Each panics when its property fails.
//!
//! `fuzz_targets/` feeds them libFuzzer's inputs (`cargo +nightly fuzz run <target>`);
//! the proptest mirrors below feed them generated ones in the ordinary `cargo test`, on
//! stable, so every property runs on every CI run.

use std::collections::HashMap;

use simplyblock_controlplane as cp;
use simplyblock_csi::handle::{SnapshotHandle, VolumeHandle};
use simplyblock_csi::params::{ClassParams, FormatParams};

/// A decoded probe report encodes and decodes to itself.
pub fn report_decode(data: &[u8]) {
    if let Ok(report) = simplyblock_discovery::decode(data) {
        let text = simplyblock_discovery::encode(&report).expect("a decoded report encodes");
        assert_eq!(
            simplyblock_discovery::decode(text.as_bytes()).ok(),
            Some(report)
        );
    }
}

/// The probe's readers of sysfs and procfs files take any text.
pub fn sysfs_parsers(data: &[u8]) {
    use simplyblock_discovery::parse;
    let text = String::from_utf8_lossy(data);
    let _ = parse::cpu_list(&text);
    let _ = parse::meminfo(&text);
    let _ = parse::uevent(&text);
    let _ = parse::mountinfo(&text);
    let _ = parse::swaps(&text);
    let _ = parse::if_inet6(&text);
    let _ = parse::ipv4_addresses(&text, &text);
    let _ = parse::content(data);
    let _ = parse::volume_nqn(&text);
    let _ = simplyblock_discovery::size::parse_size_range(&text);
}

/// A volume or snapshot handle that parses prints as a handle that parses to itself.
pub fn csi_handles(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(handle) = VolumeHandle::parse(&text) {
        let again = VolumeHandle::parse(&handle.to_string()).expect("a printed handle parses");
        assert_eq!(again, handle);
    }
    if let Ok(handle) = SnapshotHandle::parse(&text) {
        let again = SnapshotHandle::parse(&handle.to_string()).expect("a printed handle parses");
        assert_eq!(again, handle);
    }
}

/// StorageClass parameters (`key=value` lines) are accepted or refused, never a panic, and
/// a refusal says which parameter.
pub fn storage_class_parameters(data: &[u8]) {
    let params = key_values(&String::from_utf8_lossy(data));
    if let Err(e) = ClassParams::parse(&params) {
        assert!(!e.to_string().is_empty());
    }
    if let Err(e) = FormatParams::parse(&params) {
        assert!(!e.to_string().is_empty());
    }
}

/// `key=value` lines as a parameter map.
pub fn key_values(text: &str) -> HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Any mountinfo text parses, escapes and all, into at most one entry a line.
pub fn mountinfo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let entries = simplyblock_csi::fs::parse_mountinfo(&text);
    assert!(entries.len() <= text.lines().count(), "{entries:?}");
}

/// The control plane's answers decode or are refused, never a panic; the message taken
/// from an error body is never empty when the body is not blank.
pub fn controlplane_answers(data: &[u8]) {
    let _ = serde_json::from_slice::<cp::Cluster>(data);
    let _ = serde_json::from_slice::<Vec<cp::StorageNode>>(data);
    let _ = serde_json::from_slice::<Vec<cp::Task>>(data);
    let _ = serde_json::from_slice::<cp::Pool>(data);
    let _ = serde_json::from_slice::<cp::Volume>(data);
    let _ = serde_json::from_slice::<cp::Snapshot>(data);
    let _ = serde_json::from_slice::<cp::Migration>(data);
    let message = cp::message_from_body(data);
    if !String::from_utf8_lossy(data).trim().is_empty() {
        assert!(!message.is_empty(), "no message from {data:?}");
    }
}

/// A fleet file is accepted or refused with a reason; an accepted one names each worker
/// once, with an address.
pub fn sbsim_fleet_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match simplyblock_simulator::fleet::parse(&text, "fuzz") {
        Ok(fleet) => {
            let mut names = std::collections::BTreeSet::new();
            for w in &fleet.workers {
                assert!(!w.addresses.is_empty(), "{w:?}");
                assert!(names.insert(w.hostname.clone()), "{w:?} twice");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// A fault script parses or is refused; each rule of one that parses, written back as its
/// text, parses to the same rule.
pub fn sbsim_fault_grammar(data: &[u8]) {
    use simplyblock_simulator::faults;
    let text = String::from_utf8_lossy(data);
    let Ok(rules) = faults::parse(&text) else {
        return;
    };
    for rule in rules {
        let again = faults::parse(&rule.text).expect("a rule's own text parses");
        assert_eq!(again.len(), 1, "{:?} is one rule", rule.text);
        let again = &again[0];
        assert_eq!(again.kind, rule.kind);
        assert_eq!(again.method, rule.method);
        assert_eq!(again.path, rule.path);
        assert_eq!(again.rate.to_bits(), rule.rate.to_bits());
        assert_eq!(again.after, rule.after);
        assert_eq!(again.count, rule.count);
    }
}

#[cfg(test)]
mod mirrors {
    //! Each fuzz target's property over generated inputs: arbitrary bytes, and text built
    //! from the pieces each format is made of, so the parsers' accepting paths are reached
    //! too.

    use proptest::prelude::*;

    use super::*;

    fn uuid() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("3f1c6c1e-2b7a-4c55-9d0e-6a5f7d1b2c3d".to_string()),
            "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
            "[0-9a-zA-Z-]{0,40}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn report_decode_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            report_decode(&data);
        }

        #[test]
        fn report_decode_on_encoded_reports(node in "[a-z0-9-]{0,20}") {
            let report = simplyblock_discovery::Report {
                node: node.clone(),
                ..Default::default()
            };
            let text = simplyblock_discovery::encode(&report).expect("encodes");
            report_decode(text.as_bytes());
        }

        #[test]
        fn sysfs_parsers_on_text(text in "([0-9a-z:,._ /=-]{0,30}\n){0,8}") {
            sysfs_parsers(text.as_bytes());
        }

        #[test]
        fn csi_handles_on_handle_shapes(
            cluster in uuid(),
            pool in prop_oneof![uuid(), "[a-z0-9_-]{0,12}"],
            volume in uuid(),
            sep in prop_oneof![Just(":"), Just("/"), Just("::")],
        ) {
            csi_handles(format!("{cluster}{sep}{pool}{sep}{volume}").as_bytes());
            csi_handles(format!("{cluster}{sep}{volume}").as_bytes());
        }

        #[test]
        fn csi_handles_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..128)) {
            csi_handles(&data);
        }

        #[test]
        fn storage_class_parameters_on_known_keys(
            entries in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("cluster_id"), Just("pool_name"), Just("qos_rw_iops"),
                        Just("max_iops"), Just("distr_ndcs"), Just("distr_npcs"),
                        Just("encryption"), Just("max_size"), Just("mkfs_options"),
                        Just("xfs_su"), Just("xfs_sw"), Just("tune2fs_reserved_blocks"),
                        Just("zone_cluster_map"), Just("fabric"), Just("compression"),
                        Just("lvol_priority_class"), Just("max_namespace_per_subsys"),
                    ],
                    "[0-9a-zA-Z:,=_ .{}\"-]{0,24}",
                ),
                0..8,
            )
        ) {
            let text: String = entries.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            storage_class_parameters(text.as_bytes());
        }

        #[test]
        fn mountinfo_on_mountinfo_lines(
            lines in proptest::collection::vec(
                (
                    "[0-9]{1,3}",
                    "(/|[a-z/]{1,12})(\\\\[0-7]{3})?[a-z]{0,4}",
                    "[a-z0-9]{1,8}",
                    "(/dev/[a-z0-9]{1,6}|\\\\[0-9]{3})",
                ),
                0..6,
            )
        ) {
            let text: String = lines
                .iter()
                .map(|(id, mp, fs, src)| format!("{id} 1 8:1 / {mp} rw shared:1 - {fs} {src} rw\n"))
                .collect();
            mountinfo(text.as_bytes());
        }

        #[test]
        fn controlplane_answers_on_json_shapes(
            body in prop_oneof![
                "\\{\"detail\": \"[ -~]{0,20}\"\\}",
                "\\{\"detail\": \\[\\{\"loc\": \\[\"body\", [0-9]\\], \"msg\": \"[a-z ]{0,10}\"\\}\\]\\}",
                "\\{\"error\": \"[ -~]{0,20}\"\\}",
                "\\{\"id\": \"[0-9a-f-]{0,36}\", \"status\": \"[a-z_]{0,12}\"\\}",
                "[ -~]{0,40}",
                // Python reprs of empty or blank messages, behind blank bytes.
                "[\\x0b\t ]{0,2}'{0,2}[ a-z]{0,3}'{0,2}",
            ]
        ) {
            controlplane_answers(body.as_bytes());
        }

        #[test]
        fn controlplane_answers_on_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            controlplane_answers(&data);
        }

        #[test]
        fn sbsim_fleet_file_on_fleets(
            workers in proptest::collection::vec(
                ("w[0-9]", proptest::collection::vec("10\\.0\\.0\\.[0-9]", 0..2)),
                0..4,
            )
        ) {
            let mut text = String::from("workers:\n");
            for (name, addresses) in &workers {
                text.push_str(&format!("  - hostname: {name}\n    addresses: [{}]\n", addresses.join(", ")));
            }
            sbsim_fleet_file(text.as_bytes());
        }

        #[test]
        fn sbsim_fault_grammar_on_scripts(
            rules in proptest::collection::vec(
                (
                    prop_oneof![
                        Just("error"), Just("commiterror"), Just("latency"), Just("drop"),
                        Just("conflict"), Just("unready"), Just("taskfail"), Just("bogus"),
                    ],
                    proptest::collection::vec(
                        prop_oneof![
                            "method=(GET|POST|PUT|DELETE|get)",
                            "path=/api/v2/[a-z*]{1,8}/",
                            "rate=[0-9]\\.[0-9]{1,2}",
                            "after=[0-9]{1,2}",
                            "count=[0-9]{1,2}",
                            "status=[0-9]{3}",
                            "ms=[0-9]{1,3}",
                            "for=[0-9]{1,2}(ms|s|m)",
                            "name=[a-z_]{1,10}",
                        ],
                        0..4,
                    ),
                ),
                0..4,
            )
        ) {
            let script: Vec<String> = rules
                .iter()
                .map(|(kind, opts)| {
                    if opts.is_empty() { kind.to_string() } else { format!("{kind}:{}", opts.join(",")) }
                })
                .collect();
            sbsim_fault_grammar(script.join(";").as_bytes());
        }
    }
}
