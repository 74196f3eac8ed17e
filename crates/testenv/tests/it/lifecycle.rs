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

/// `testenv build` with this cache directory and a PATH holding no Go.
fn build_without_go(cache: &std::path::Path, path: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_testenv"));
    cmd.arg("build")
        .env("SIMPLYBLOCK_TESTENV_CACHE", cache)
        .env("PATH", path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn a_build_without_go_says_what_to_install() {
    let cache = tempfile::tempdir().expect("cache dir");
    let empty = tempfile::tempdir().expect("an empty PATH");
    let out = build_without_go(cache.path(), empty.path())
        .output()
        .expect("testenv build runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "it succeeded without Go: {stderr}");
    assert!(
        stderr.contains(
            "Go is needed to build kube-apiserver, etcd, csi-sanity, helm, promtool and kubectl"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("https://go.dev/doc/install"), "{stderr}");
    assert!(stderr.contains("`go` could not be run"), "{stderr}");
}

#[test]
fn a_build_waits_for_the_lock_and_reuses_what_the_holder_built() {
    use simplyblock_testenv::assets::{
        CSI_TEST_VERSION, ETCD_VERSION, HELM_VERSION, KUBERNETES_VERSION, PROMTOOL_VERSION,
    };

    let cache = tempfile::tempdir().expect("cache dir");
    let empty = tempfile::tempdir().expect("an empty PATH");
    let lock = std::fs::File::create(cache.path().join("build.lock")).expect("lock file");
    lock.lock().expect("hold the build lock");
    let mut child = build_without_go(cache.path(), empty.path())
        .spawn()
        .expect("testenv build starts");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let waiting = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("another process is building the test binaries; waiting for it"));
    assert!(waiting.is_some(), "testenv build did not say it waits");
    // What the holder of the lock builds: the second build must take these, and with no
    // Go on its PATH it could not build them itself.
    let apiserver = cache
        .path()
        .join(format!("kube-apiserver-{KUBERNETES_VERSION}"))
        .join("kube-apiserver");
    let etcd = cache
        .path()
        .join(format!("etcd-{ETCD_VERSION}"))
        .join("etcd");
    let sanity = cache
        .path()
        .join(format!("csi-sanity-{CSI_TEST_VERSION}"))
        .join("csi-sanity");
    let helm = cache
        .path()
        .join(format!("helm-{HELM_VERSION}"))
        .join("helm");
    let promtool = cache
        .path()
        .join(format!("promtool-{PROMTOOL_VERSION}"))
        .join("promtool");
    let kubectl = cache
        .path()
        .join(format!("kubectl-{KUBERNETES_VERSION}"))
        .join("kubectl");
    let node: Vec<std::path::PathBuf> = [
        "kubelet",
        "kube-controller-manager",
        "kube-scheduler",
        "kube-proxy",
    ]
    .iter()
    .map(|c| {
        cache
            .path()
            .join(format!("{c}-{KUBERNETES_VERSION}"))
            .join(c)
    })
    .collect();
    for bin in [&apiserver, &etcd, &sanity, &helm, &promtool, &kubectl]
        .into_iter()
        .chain(&node)
    {
        std::fs::create_dir_all(bin.parent().expect("parent")).expect("mkdir");
        std::fs::write(bin, "built by the lock holder").expect("write");
    }
    drop(lock);
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().expect("testenv build ends");
    assert!(out.status.success(), "{}", rest.join("\n"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("kube-apiserver: {}", apiserver.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("etcd: {}", etcd.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("csi-sanity: {}", sanity.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("helm: {}", helm.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("promtool: {}", promtool.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("kubectl: {}", kubectl.display())),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("kubelet: {}", node[0].display())),
        "{stdout}"
    );
    for bin in [&apiserver, &etcd, &sanity, &helm, &promtool, &kubectl]
        .into_iter()
        .chain(&node)
    {
        assert_eq!(
            std::fs::read_to_string(bin).expect("read"),
            "built by the lock holder"
        );
    }
}
