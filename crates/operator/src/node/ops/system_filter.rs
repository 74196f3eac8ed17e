//! The system-volume filter of a Remove (`spec.remove.systemVolumeFilterRegex`): the
//! volumes of the node whose names it matches are deleted, not moved. The StorageNodeOps
//! webhook admits a filter only if [`compile`] takes it, and the drain compiles it with
//! the same function before each use, so what was admitted is what runs.
//!
//! The rule, all of it said at once when broken:
//! - at most [`MAX_LEN`] characters;
//! - a regular expression of the `regex` crate (the engine the drain matches with);
//! - starts with `^`, and every alternative is anchored at the start of the name, so it
//!   names a prefix rather than matching anywhere in a name;
//! - matches neither the empty name (a pattern that can match nothing matches every name
//!   at its start) nor any of [`ORDINARY_NAMES`].

use regex::Regex;
use regex_syntax::hir::Look;

/// The longest filter admitted: a name prefix needs far less, and a longer pattern costs
/// the webhook time the API server waits for.
pub const MAX_LEN: usize = 256;

/// Names a filter must not match: what claims (`pvc-<uid>`), people and tools call
/// volumes. A sample, not a proof; the drain also deletes only volumes the control plane
/// attributes to the node's cluster and the node, made for no claim.
pub const ORDINARY_NAMES: &[&str] = &[
    "a",
    "z",
    "0",
    "data",
    "db-0",
    "backup",
    "test",
    "volume-1",
    "postgres-data-postgres-0",
    "pvc-3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47",
    "3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47",
];

/// `pattern` compiled, or the sentence that refuses it: every problem, why it matters and
/// what to do.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    checked(pattern).map_err(|problems| {
        format!(
            "spec.remove.systemVolumeFilterRegex {pattern:?} is refused: {}. The drain deletes, rather than moves, every volume of the node whose name it matches; give a pattern anchored with ^ to a prefix only the system's own volumes carry, like the default {}",
            problems.join("; "),
            simplyblock_api::storage_node_ops::DEFAULT_SYSTEM_VOLUME_FILTER
        )
    })
}

/// `pattern` compiled, or what is wrong with it, each problem said once.
fn checked(pattern: &str) -> Result<Regex, Vec<String>> {
    let length = pattern.chars().count();
    if length > MAX_LEN {
        return Err(vec![format!(
            "it is {length} characters long, and at most {MAX_LEN} are admitted"
        )]);
    }
    let mut problems = Vec::new();
    let starts = pattern.starts_with('^');
    if !starts {
        problems.push("it does not start with ^, so it matches anywhere in a name".to_string());
    }
    let hir = match regex_syntax::Parser::new().parse(pattern) {
        Ok(hir) => hir,
        Err(e) => {
            problems.push(format!("it is not a regular expression ({})", syntax(&e)));
            return Err(problems);
        }
    };
    if starts && !hir.properties().look_set_prefix().contains(Look::Start) {
        problems.push(
            "not every alternative is anchored with ^, so one matches anywhere in a name"
                .to_string(),
        );
    }
    let regex = match Regex::new(pattern) {
        Ok(regex) => regex,
        Err(e) => {
            problems.push(format!(
                "it is not a regular expression the drain can run ({})",
                one_line(&e.to_string())
            ));
            return Err(problems);
        }
    };
    if regex.is_match("") {
        problems.push("it matches the empty name, and so every name at its start".to_string());
    }
    let ordinary: Vec<&str> = ORDINARY_NAMES
        .iter()
        .copied()
        .filter(|n| regex.is_match(n))
        .collect();
    if !ordinary.is_empty() {
        problems.push(format!(
            "it matches ordinary volume names ({})",
            ordinary.join(", ")
        ));
    }
    if problems.is_empty() {
        Ok(regex)
    } else {
        Err(problems)
    }
}

/// A parse error in one line: what, and at which character.
fn syntax(e: &regex_syntax::Error) -> String {
    match e {
        regex_syntax::Error::Parse(e) => {
            format!("{} at character {}", e.kind(), e.span().start.column)
        }
        regex_syntax::Error::Translate(e) => {
            format!("{} at character {}", e.kind(), e.span().start.column)
        }
        e => one_line(&e.to_string()),
    }
}

/// The `error:` line of the engine's multi-line message, or the message on one line.
fn one_line(message: &str) -> String {
    message
        .lines()
        .find_map(|l| l.trim().strip_prefix("error: "))
        .map(str::to_string)
        .unwrap_or_else(|| message.split_whitespace().collect::<Vec<_>>().join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_and_other_anchored_prefixes_are_admitted() {
        for pattern in [
            simplyblock_api::storage_node_ops::DEFAULT_SYSTEM_VOLUME_FILTER,
            "^(sb-fio-baseline|sb-bench)-[0-9]+$",
            "^sb-fio-baseline-.*|^sb-bench-.*",
        ] {
            assert!(
                compile(pattern).is_ok(),
                "{pattern}: {:?}",
                compile(pattern)
            );
        }
    }

    #[test]
    fn a_pattern_that_matches_everything_is_refused_with_every_reason() {
        let refused = compile(".*").expect_err("refused");
        assert_eq!(
            refused,
            "spec.remove.systemVolumeFilterRegex \".*\" is refused: it does not start with ^, so it matches anywhere in a name; it matches the empty name, and so every name at its start; it matches ordinary volume names (a, z, 0, data, db-0, backup, test, volume-1, postgres-data-postgres-0, pvc-3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47, 3f0c2b1e-9a4d-4c7e-8b2f-6d1e0a9c5b47). The drain deletes, rather than moves, every volume of the node whose name it matches; give a pattern anchored with ^ to a prefix only the system's own volumes carry, like the default ^sb-fio-baseline-.*"
        );
    }

    #[test]
    fn each_rule_is_said_on_its_own() {
        let table: &[(&str, &[&str])] = &[
            ("sb-fio-baseline-.*", &["does not start with ^"]),
            (
                "^sb-fio-baseline-.*|bench",
                &["not every alternative is anchored"],
            ),
            (
                "^(sb",
                &["not a regular expression (unclosed group at character 2)"],
            ),
            (
                "sb-(",
                &["does not start with ^", "not a regular expression"],
            ),
            ("^[a-z]+", &["ordinary volume names (a, z, data, db-0"]),
            ("^x*", &["matches the empty name"]),
            ("^pvc-", &["ordinary volume names (pvc-3f0c2b1e"]),
        ];
        for (pattern, said) in table {
            let refused = compile(pattern).expect_err(pattern);
            for s in *said {
                assert!(refused.contains(s), "{pattern}: {refused}");
            }
        }
        let long = format!("^{}", "a".repeat(MAX_LEN));
        assert!(
            compile(&long)
                .expect_err("long")
                .contains("257 characters long, and at most 256"),
        );
    }
}
