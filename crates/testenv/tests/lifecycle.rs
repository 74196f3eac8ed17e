//! The environment starts a working API server and leaves nothing behind: not when it is
//! dropped, not when a test panics, not when its process is killed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use simplyblock_testenv::{TestEnv, process::alive};

fn wait_gone(pids: &[u32]) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if pids.iter().all(|p| !alive(*p)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

#[tokio::test]
async fn serves_the_core_api_and_cleans_up_on_drop() {
    let env = TestEnv::start().await.expect("the test environment starts");
    let client = env.client().await.expect("a client");
    let names: Vec<String> = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .expect("namespaces list")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(
        names.contains(&"default".to_string()),
        "namespaces: {names:?}"
    );
    assert!(env.kubeconfig_path().is_file());

    let (apiserver, etcd) = env.pids();
    let dir = env.dir().to_path_buf();
    assert!(alive(apiserver) && alive(etcd));
    drop(env);
    assert!(
        wait_gone(&[apiserver, etcd]),
        "processes outlived the environment"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
fn a_panicking_test_leaves_no_process_or_file() {
    let (tx, rx) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        rt.block_on(async move {
            let env = TestEnv::start().await.expect("the test environment starts");
            tx.send((env.pids(), env.dir().to_path_buf()))
                .expect("report");
            panic!("a test fails while holding the environment");
        })
    })
    .join();
    assert!(outcome.is_err(), "the thread was meant to panic");
    let ((apiserver, etcd), dir) = rx.recv().expect("the environment started before the panic");
    assert!(
        wait_gone(&[apiserver, etcd]),
        "processes outlived a panicking test"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[test]
fn killing_the_owner_kills_the_servers() {
    let mut up = Command::new(env!("CARGO_BIN_EXE_testenv"))
        .arg("up")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("testenv up starts");
    let stdout = up.stdout.take().expect("stdout");
    let mut pids = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("a line of output");
        if let Some(rest) = line.strip_prefix("processes: ") {
            pids = rest
                .split(", ")
                .filter_map(|p| p.rsplit(' ').next()?.parse::<u32>().ok())
                .collect();
            break;
        }
    }
    assert_eq!(pids.len(), 2, "testenv up did not report its processes");
    assert!(pids.iter().all(|p| alive(*p)));
    // SIGKILL: no destructor runs, only the kernel's parent-death signal can help.
    up.kill().expect("kill testenv up");
    up.wait().expect("reap testenv up");
    assert!(
        wait_gone(&pids),
        "kube-apiserver or etcd outlived a killed owner"
    );
}

#[tokio::test]
async fn the_shared_environment_is_started_once() {
    let a = TestEnv::shared().expect("shared environment");
    let b = TestEnv::shared().expect("shared environment");
    assert_eq!(a.url(), b.url());
    let client = a.client().await.expect("client");
    let v = client.apiserver_version().await.expect("version");
    assert_eq!(format!("v{}.{}", v.major, v.minor), "v1.37");
}
