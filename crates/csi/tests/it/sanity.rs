//! csi-sanity's controller and node suites against the driver (in-process, unix socket)
//! with sbsim and the loop attacher. The skipped cases are listed in the README with the
//! reason; everything else must pass.

use std::time::Duration;

use crate::common::*;

/// Cases that do not apply to this driver; the README lists each with the reason.
const SKIPS: &[&str] = &[];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn csi_sanity_passes_with_mount_volumes() {
    sanity("mount").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn csi_sanity_passes_with_block_volumes() {
    sanity("block").await;
}

/// One csi-sanity run (controller and node suites) with volumes of this access type.
async fn sanity(access: &str) {
    let bin = tokio::task::spawn_blocking(simplyblock_testenv::assets::csi_sanity)
        .await
        .expect("join")
        .expect("csi-sanity (needs Go and the Go module proxy on first use)");
    let sim = sbsim(3).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let _cleanup = Cleanup {
        dir: dir.path().to_path_buf(),
        files: sim.files.clone(),
    };
    let driver =
        DriverProc::start(dir.path(), &[sim.entry()], &sim.files, Default::default()).await;
    let params = dir.path().join("params.yaml");
    std::fs::write(
        &params,
        format!(
            "cluster_id: \"{}\"\npool_name: \"{}\"\n",
            sim.cluster, sim.pool_name
        ),
    )
    .expect("params");
    let junit = dir.path().join("junit.xml");
    let mut cmd = tokio::process::Command::new(&bin);
    cmd.arg(format!("-csi.endpoint=unix://{}", driver.socket.display()))
        .arg(format!(
            "-csi.stagingdir={}",
            dir.path().join("staging").display()
        ))
        .arg(format!(
            "-csi.mountdir={}",
            dir.path().join("mount").display()
        ))
        .arg(format!("-csi.testvolumeparameters={}", params.display()))
        .arg(format!("-csi.testvolumesize={}", 1u64 << 30))
        .arg(format!("-csi.testvolumeexpandsize={}", 2u64 << 30))
        .arg(format!("-csi.testvolumeaccesstype={access}"))
        .arg(format!("-csi.junitfile={}", junit.display()))
        .arg("-ginkgo.no-color")
        .kill_on_drop(true);
    if !SKIPS.is_empty() {
        cmd.arg(format!("-ginkgo.skip={}", SKIPS.join("|")));
    }
    let out = tokio::time::timeout(Duration::from_secs(1500), cmd.output())
        .await
        .expect("csi-sanity finished within 25 minutes")
        .expect("run csi-sanity");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Print the summary (and the failures, which ginkgo lists at the end).
    let lines: Vec<&str> = stdout.lines().collect();
    let tail = lines.len().saturating_sub(60);
    eprintln!(
        "---- csi-sanity, {access} volumes (last lines) ----\n{}",
        lines[tail..].join("\n")
    );
    if !out.status.success() {
        eprintln!(
            "---- csi-sanity stderr ----\n{}",
            stderr
                .chars()
                .rev()
                .take(4000)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>()
        );
    }
    if let Ok(xml) = std::fs::read_to_string(&junit) {
        let cases = skipped_cases(&xml);
        eprintln!(
            "---- csi-sanity, {access} volumes: {} skipped or pending ----",
            cases.len()
        );
        for (name, why) in &cases {
            eprintln!("  {name}: {why}");
        }
    }
    driver.stop().await;
    assert!(out.status.success(), "csi-sanity failed (summary above)");
}

fn attr(tag: &str, key: &str) -> Option<String> {
    let start = tag.find(&format!("{key}=\""))? + key.len() + 2;
    let end = tag[start..].find('"')? + start;
    Some(
        tag[start..end]
            .replace("&#34;", "\"")
            .replace("&quot;", "\"")
            .replace("&amp;", "&")
            .replace("&lt;", "<")
            .replace("&gt;", ">"),
    )
}

/// `(name, reason)` of every skipped or pending case in ginkgo's JUnit report.
fn skipped_cases(xml: &str) -> Vec<(String, String)> {
    xml.split("<testcase ")
        .skip(1)
        .filter_map(|case| {
            let status = attr(case, "status")?;
            if status != "skipped" && status != "pending" {
                return None;
            }
            let name = attr(case, "name")?;
            let why = case
                .find("<skipped ")
                .and_then(|i| attr(&case[i..], "message"))
                .unwrap_or(status);
            Some((name, why))
        })
        .collect()
}
