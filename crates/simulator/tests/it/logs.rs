//! `sbsim --log-format json`: the real binary's every log line is one JSON object.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::*;

#[test]
fn with_log_format_json_every_line_on_stderr_is_a_json_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(&fleet, fleet_yaml(1, 1)).expect("fleet");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sbsim"))
        .args(["serve", "--listen", "127.0.0.1:0", "--log-format", "json"])
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--fleet")
        .arg(&fleet)
        .env("RUST_LOG", "info")
        .env_remove("SIMPLYBLOCK_LOG_FORMAT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sbsim");
    let stderr = child.stderr.take().expect("stderr");
    let mut seen = Vec::new();
    // Up to the line that says it listens: the warning about the missing token and the
    // start-up lines before it are all held to the format.
    for line in BufReader::new(stderr).lines() {
        let line = line.expect("a line");
        let object: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            object["level"].is_string() && object["timestamp"].is_string(),
            "{line}"
        );
        let listening = object["fields"]["message"] == "sbsim listening";
        seen.push(object);
        if listening {
            break;
        }
    }
    child.kill().expect("kill");
    child.wait().expect("reap");
    let last = seen.last().expect("sbsim logged");
    assert_eq!(last["fields"]["message"], "sbsim listening", "{seen:#?}");
    assert!(
        last["fields"]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
        "{last:#}"
    );
    assert!(
        seen.iter().any(|l| l["level"] == "WARN"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("--token"))),
        "the warning about the missing token is there too: {seen:#?}"
    );
}
