//! `kill -9` of the real binary at arbitrary moments: nothing acknowledged is lost, and
//! queued tasks resume after the restart and finish once, with no duplicate nodes.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use crate::common::*;
use simplyblock_controlplane::*;

struct Proc {
    child: Child,
    url: String,
}

fn spawn(state: &std::path::Path, fleet: &std::path::Path, scale: &str) -> Proc {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sbsim"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--seed",
            "7",
            "--token",
            TOKEN,
        ])
        .arg("--state-dir")
        .arg(state)
        .arg("--fleet")
        .arg(fleet)
        .args(["--time-scale", scale])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sbsim");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("url line");
    let url = line.trim().to_string();
    assert!(
        url.starts_with("http://127.0.0.1:"),
        "sbsim printed {url:?}"
    );
    Proc { child, url }
}

fn kill9(mut p: Proc) {
    // Child::kill is SIGKILL on Unix: no shutdown path runs.
    p.child.kill().expect("kill -9");
    p.child.wait().expect("reap");
}

#[tokio::test]
async fn kill_9_loses_nothing_and_queued_tasks_resume_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fleet = dir.path().join("fleet.yaml");
    std::fs::write(&fleet, fleet_yaml(3, 3)).expect("fleet");
    let state = dir.path().join("state");

    // Phase 1: queue three node adds (each reboots its worker), kill mid-flight.
    let p = spawn(&state, &fleet, "20");
    let c = client_for(&p.url);
    let cluster = c
        .create_cluster(&ClusterCreate::new("k9", 10, 4))
        .await
        .expect("create");
    let mut tasks = Vec::new();
    for w in ["w1", "w2", "w3"] {
        tasks.push(
            c.add_storage_node(cluster.id, &StorageNodeAdd::new(snode_address(w), "eth0"))
                .await
                .expect("add"),
        );
    }
    // At 20x a node add takes about 1.5 s real: kill as soon as one is seen running, with
    // at least one not done yet (workers rebooting).
    let before = eventually("a node add running", || async {
        let t = c.list_tasks(cluster.id).await.ok()?;
        (t.iter().any(|t| t.status == TaskStatus::Running)
            && t.iter().any(|t| t.status != TaskStatus::Done))
        .then_some(t)
    })
    .await;
    kill9(p);
    println!(
        "killed with the adds {:?}",
        before.iter().map(|t| t.status).collect::<Vec<_>>()
    );

    let p = spawn(&state, &fleet, "20");
    let c = client_for(&p.url);
    let again = c.get_cluster(cluster.id).await.expect("cluster survived");
    assert_eq!(again.secret, cluster.secret);
    assert_eq!(again.nqn, cluster.nqn);
    let done = eventually("tasks resumed and done", || async {
        let t = c.list_tasks(cluster.id).await.ok()?;
        t.iter().all(|t| t.status == TaskStatus::Done).then_some(t)
    })
    .await;
    let mut ids: Vec<Uuid> = done.iter().map(|t| t.id).collect();
    ids.sort();
    tasks.sort();
    assert_eq!(ids, tasks, "no task lost, none added");
    for t in &done {
        assert_eq!(t.function_result, "Node add result: Success");
        assert_eq!(t.retry, 0, "the reboot is not charged as a retry");
    }
    let nodes = c.list_storage_nodes(cluster.id).await.expect("nodes");
    let mut hosts: Vec<&str> = nodes.iter().map(|n| n.hostname.as_str()).collect();
    hosts.sort();
    assert_eq!(
        hosts,
        ["w1", "w2", "w3"],
        "one node per worker, no duplicates"
    );

    // Phase 2: a burst of volume creates, killed in the middle.
    c.activate_cluster(cluster.id).await.expect("activate");
    eventually("active", || async {
        (c.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: "p".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let burst = {
        let c = c.clone();
        let cid = cluster.id;
        let pid = pool.id;
        tokio::spawn(async move {
            for i in 0..400 {
                match c
                    .create_volume(cid, pid, &VolumeCreate::new(format!("v{i}"), 1_000_000_000))
                    .await
                {
                    Ok(id) => {
                        let _ = tx.send(id);
                    }
                    Err(_) => break,
                }
            }
        })
    };
    // Kill in the middle of the burst: once twenty creates were acknowledged.
    let mut acknowledged = Vec::new();
    while acknowledged.len() < 20 {
        acknowledged.push(
            rx.recv()
                .await
                .expect("a create acknowledged before the kill"),
        );
    }
    kill9(p);
    let _ = burst.await;
    while let Ok(id) = rx.try_recv() {
        acknowledged.push(id);
    }
    assert!(
        !acknowledged.is_empty(),
        "some creates were acknowledged before the kill"
    );

    let p = spawn(&state, &fleet, "20");
    let c = client_for(&p.url);
    let vols = c.list_volumes(cluster.id, pool.id).await.expect("volumes");
    for id in &acknowledged {
        let v = vols
            .iter()
            .find(|v| v.id == *id)
            .expect("acknowledged volume survived");
        assert_eq!(v.status, VolumeStatus::Online);
    }
    // At most the one create in flight at the kill committed without its answer arriving.
    assert!(
        vols.len() <= acknowledged.len() + 1,
        "{} > {}",
        vols.len(),
        acknowledged.len()
    );
    println!(
        "kill -9: {} acknowledged volume creates, {} found after restart",
        acknowledged.len(),
        vols.len()
    );
    kill9(p);
}
