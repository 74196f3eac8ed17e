//! The README's demo command works: run it once and read what it prints.

use std::process::Command;

#[test]
fn the_demo_shows_the_deployment_document() {
    let out = Command::new(env!("CARGO_BIN_EXE_simplyblock-demo"))
        .arg("--once")
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the demo failed:\n{stdout}\n{stderr}");
    let header = stdout
        .lines()
        .find(|l| l.starts_with("NAME"))
        .unwrap_or_else(|| panic!("no table in:\n{stdout}"));
    let columns: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        columns,
        ["NAME", "APPROVED", "PHASE", "STEP", "CLUSTER", "AGE"]
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with("discovered-initial"))
        .unwrap_or_else(|| panic!("the sample document is not listed:\n{stdout}"));
    assert!(row.split_whitespace().nth(1) == Some("false"), "{row}");
}
