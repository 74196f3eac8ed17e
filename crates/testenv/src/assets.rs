//! The binaries the tests run (kube-apiserver and etcd, and the peer tools csi-sanity,
//! helm and promtool): found in a versioned cache, or built there once from the Go module proxy.
//!
//! No package registry ships kube-apiserver, so it is compiled from `k8s.io/kubernetes` the
//! way envtest's assets are produced. The build runs under an exclusive file lock, so test
//! binaries started in parallel wait for one build instead of starting their own.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Error;

/// The Kubernetes release the tests run against.
pub const KUBERNETES_VERSION: &str = "v1.37.2";
/// The staging modules (`k8s.io/api`, …) released together with [`KUBERNETES_VERSION`].
const STAGING_VERSION: &str = "v0.37.2";
/// The etcd release; Kubernetes 1.37 requires etcd 3.5.11 or newer.
pub const ETCD_VERSION: &str = "v3.6.16";
/// The oldest Go that builds [`KUBERNETES_VERSION`].
const MINIMUM_GO: (u32, u32) = (1, 26);

/// Where the binaries live: `$SIMPLYBLOCK_TESTENV_CACHE`, else `$XDG_CACHE_HOME/simplyblock-testenv`,
/// else `~/.cache/simplyblock-testenv`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SIMPLYBLOCK_TESTENV_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("simplyblock-testenv")
}

/// Paths of the two binaries a test environment runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
}

/// Returns both binaries, building whichever is missing. Prints progress to stderr while
/// building, since a cold build takes minutes.
pub fn ensure() -> Result<Binaries, Error> {
    let cache = cache_dir();
    fs::create_dir_all(&cache)
        .map_err(|e| Error::io(format!("creating {}", cache.display()), e))?;
    let kube_apiserver = cache
        .join(format!("kube-apiserver-{KUBERNETES_VERSION}"))
        .join("kube-apiserver");
    let etcd = cache.join(format!("etcd-{ETCD_VERSION}")).join("etcd");
    if kube_apiserver.is_file() && etcd.is_file() {
        return Ok(Binaries {
            kube_apiserver,
            etcd,
        });
    }

    let lock_path = cache.join("build.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        eprintln!("testenv: another process is building the test binaries; waiting for it");
        lock.lock()
            .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    }
    // Another process may have finished the build while this one waited.
    if !kube_apiserver.is_file() || !etcd.is_file() {
        check_go()?;
    }
    if !etcd.is_file() {
        build(&Recipe::etcd(), &etcd)?;
    }
    if !kube_apiserver.is_file() {
        build(&Recipe::kube_apiserver()?, &kube_apiserver)?;
    }
    drop(lock);
    Ok(Binaries {
        kube_apiserver,
        etcd,
    })
}

/// The csi-test release whose csi-sanity checks the CSI driver.
pub const CSI_TEST_VERSION: &str = "v5.6.0";

/// csi-sanity, the CSI driver's peer suite: found in the cache, or built there once under
/// the same lock as the API server's binaries.
pub fn csi_sanity() -> Result<PathBuf, Error> {
    tool(
        &format!("csi-sanity-{CSI_TEST_VERSION}"),
        "csi-sanity",
        || Ok(Recipe::csi_sanity()),
    )
}

/// The Helm release that lints, renders and installs the chart in tests.
pub const HELM_VERSION: &str = "v4.3.2";

/// helm, the chart's peer tool: found in the cache, or built there once under the same
/// lock as the API server's binaries.
pub fn helm() -> Result<PathBuf, Error> {
    tool(&format!("helm-{HELM_VERSION}"), "helm", || {
        Ok(Recipe::helm())
    })
}

/// The Prometheus release whose promtool checks and unit-tests the chart's alerting rules,
/// as its Go module version (v0.3xx.y is Prometheus 3.xx.y).
pub const PROMTOOL_VERSION: &str = "v0.316.0";

/// promtool, the alerting rules' peer tool: found in the cache, or built there once under
/// the same lock as the API server's binaries.
pub fn promtool() -> Result<PathBuf, Error> {
    tool(&format!("promtool-{PROMTOOL_VERSION}"), "promtool", || {
        Ok(Recipe::promtool())
    })
}

/// The binaries of a node beside the API server: what schedules pods, runs the
/// controllers that own them, starts their containers and routes their Services.
#[derive(Debug, Clone)]
pub struct NodeBinaries {
    pub kubelet: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub kube_proxy: PathBuf,
}

/// kubelet, kube-controller-manager, kube-scheduler and kube-proxy at [`KUBERNETES_VERSION`]: found in
/// the cache, or built there once (same recipe as kube-apiserver; several minutes each on a
/// cold cache, much less once kube-apiserver's packages are compiled).
pub fn node() -> Result<NodeBinaries, Error> {
    let component = |command: &str| {
        let command = command.to_string();
        tool(&node_binary_folder(&command), &command.clone(), move || {
            Recipe::kubernetes(&command)
        })
    };
    Ok(NodeBinaries {
        kubelet: component("kubelet")?,
        kube_controller_manager: component("kube-controller-manager")?,
        kube_scheduler: component("kube-scheduler")?,
        kube_proxy: component("kube-proxy")?,
    })
}

/// kubectl at [`KUBERNETES_VERSION`], the client people use: found in the cache, or built
/// there once (same recipe as kube-apiserver).
pub fn kubectl() -> Result<PathBuf, Error> {
    tool(&node_binary_folder("kubectl"), "kubectl", || {
        Recipe::kubernetes("kubectl")
    })
}

/// A CSI sidecar built from its Go module: the image it is tagged as, and its binary.
#[derive(Debug, Clone)]
pub struct Sidecar {
    pub image: &'static str,
    pub binary: PathBuf,
}

/// The CSI sidecars as (image, Go module, version, package). The images and versions are
/// the ones the SimplyblockDriver renders by default (a test of the operator's holds the
/// two lists together), plus the snapshot controller, which a cluster serving
/// VolumeSnapshots runs once.
///
/// Not here, because this machine's Go module proxy refuses every version of them
/// (`go list -m -versions` and `go mod download` answer 403 "This module version is not
/// available"): csi-attacher v4.8.1 (the proxy serves only v4.12.0 and v4.13.0),
/// csi-resizer, csi-external-health-monitor-controller, csi-node-driver-registrar and
/// livenessprobe.
/// The module's version is the image's tag.
pub const SIDECARS: [(&str, &str, &str); 3] = [
    (
        "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
        "github.com/kubernetes-csi/external-provisioner/v5",
        "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner",
    ),
    (
        "registry.k8s.io/sig-storage/csi-snapshotter:v8.2.1",
        "github.com/kubernetes-csi/external-snapshotter/v8",
        "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter",
    ),
    (
        "registry.k8s.io/sig-storage/snapshot-controller:v8.2.1",
        "github.com/kubernetes-csi/external-snapshotter/v8",
        "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller",
    ),
];

/// Every sidecar of [`SIDECARS`]: found in the cache, or built there once.
pub fn sidecars() -> Result<Vec<Sidecar>, Error> {
    SIDECARS
        .iter()
        .map(|&(image, module, package)| {
            let command = package.rsplit('/').next().unwrap_or(package);
            let version = image.rsplit(':').next().unwrap_or_default();
            let binary = tool(&format!("{command}-{version}"), command, || {
                Ok(Recipe::module(
                    command,
                    module,
                    version,
                    package,
                    format!("-s -w -X main.version={version}"),
                ))
            })?;
            Ok(Sidecar { image, binary })
        })
        .collect()
}

/// The CoreDNS release a node's cluster DNS runs, and the image it is tagged as.
pub const COREDNS_VERSION: &str = "v1.12.1";
pub const COREDNS_IMAGE: &str = "registry.k8s.io/coredns/coredns:v1.12.1";

/// CoreDNS, the node's cluster DNS: found in the cache, or built there once.
pub fn coredns() -> Result<PathBuf, Error> {
    let module = "github.com/coredns/coredns";
    tool(&format!("coredns-{COREDNS_VERSION}"), "coredns", || {
        Ok(Recipe::module(
            "coredns",
            module,
            COREDNS_VERSION,
            module,
            "-s -w".into(),
        ))
    })
}

/// A node binary (`kubelet`, `kube-proxy`, …) when it is in the cache; never builds.
pub fn cached_node_binary(command: &str) -> Option<PathBuf> {
    let bin = cache_dir().join(node_binary_folder(command)).join(command);
    bin.is_file().then_some(bin)
}

/// The cache folder of a Kubernetes command at [`KUBERNETES_VERSION`].
fn node_binary_folder(command: &str) -> String {
    format!("{command}-{KUBERNETES_VERSION}")
}

/// The binary `name` in the cache folder `folder`, built from `recipe` when missing.
fn tool(
    folder: &str,
    name: &str,
    recipe: impl FnOnce() -> Result<Recipe, Error>,
) -> Result<PathBuf, Error> {
    let cache = cache_dir();
    let bin = cache.join(folder).join(name);
    if bin.is_file() {
        return Ok(bin);
    }
    fs::create_dir_all(&cache)
        .map_err(|e| Error::io(format!("creating {}", cache.display()), e))?;
    let lock_path = cache.join("build.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::io(format!("creating {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        eprintln!("testenv: another process is building the test binaries; waiting for it");
        lock.lock()
            .map_err(|e| Error::io(format!("locking {}", lock_path.display()), e))?;
    }
    if !bin.is_file() {
        check_go()?;
        build(&recipe()?, &bin)?;
    }
    drop(lock);
    Ok(bin)
}

/// A throwaway Go module whose only purpose is to compile one command.
struct Recipe {
    what: String,
    go_mod: String,
    tools_go: String,
    package: String,
    ldflags: String,
}

impl Recipe {
    /// `package` of `module` at `version`, required from a module of our own named after
    /// `name`.
    fn module(name: &str, module: &str, version: &str, package: &str, ldflags: String) -> Recipe {
        Recipe {
            what: format!("{name} {version}"),
            go_mod: format!(
                "module local/testenv-{name}\n\ngo 1.26.0\n\nrequire {module} {version}\n"
            ),
            tools_go: tools_go(&[package]),
            package: package.to_string(),
            ldflags,
        }
    }

    fn etcd() -> Recipe {
        // etcd's server module carries relative replace lines, so `go install pkg@v`
        // refuses it; requiring it from a module of our own works.
        let module = "go.etcd.io/etcd/server/v3";
        Recipe::module("etcd", module, ETCD_VERSION, module, "-s -w".into())
    }

    fn csi_sanity() -> Recipe {
        Recipe::module(
            "csi-sanity",
            "github.com/kubernetes-csi/csi-test/v5",
            CSI_TEST_VERSION,
            "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity",
            "-s -w".into(),
        )
    }

    fn helm() -> Recipe {
        Recipe::module(
            "helm",
            "helm.sh/helm/v4",
            HELM_VERSION,
            "helm.sh/helm/v4/cmd/helm",
            // Without the stamp `helm version` reports a bare minor version.
            format!("-s -w -X helm.sh/helm/v4/internal/version.version={HELM_VERSION}"),
        )
    }

    fn promtool() -> Recipe {
        // The module is versioned v0.3xx.y for Prometheus 3.xx.y; the stamp is the latter.
        let release = PROMTOOL_VERSION
            .strip_prefix("v0.3")
            .map(|rest| format!("3.{}", rest.trim_start_matches('0')))
            .unwrap_or_else(|| PROMTOOL_VERSION.to_string());
        Recipe::module(
            "promtool",
            "github.com/prometheus/prometheus",
            PROMTOOL_VERSION,
            "github.com/prometheus/prometheus/cmd/promtool",
            format!("-s -w -X github.com/prometheus/common/version.Version={release}"),
        )
    }

    fn kube_apiserver() -> Result<Recipe, Error> {
        Recipe::kubernetes("kube-apiserver")
    }

    /// One command of `k8s.io/kubernetes` (`cmd/<command>`), stamped with the release.
    fn kubernetes(command: &str) -> Result<Recipe, Error> {
        // k8s.io/kubernetes requires every staging module at v0.0.0, which only resolves
        // inside its own repository; pin each one to the matching published release.
        let staging = staging_modules()?;
        let mut go_mod = format!(
            "module local/testenv-{command}\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes {KUBERNETES_VERSION}\n\n"
        );
        for module in staging {
            go_mod.push_str(&format!("replace {module} => {module} {STAGING_VERSION}\n"));
        }
        let minor = KUBERNETES_VERSION.split('.').nth(1).unwrap_or("0");
        let package = format!("k8s.io/kubernetes/cmd/{command}");
        Ok(Recipe {
            what: format!("{command} {KUBERNETES_VERSION}"),
            go_mod,
            tools_go: tools_go(&[&package]),
            package,
            // Without the version stamp /version reports v0.0.0-master and clients that
            // check the server version misbehave.
            ldflags: format!(
                "-s -w -X k8s.io/component-base/version.gitVersion={KUBERNETES_VERSION} \
                 -X k8s.io/component-base/version.gitMajor=1 \
                 -X k8s.io/component-base/version.gitMinor={minor}"
            ),
        })
    }
}

fn tools_go(imports: &[&str]) -> String {
    let mut s = String::from("//go:build tools\n\npackage tools\n\nimport (\n");
    for i in imports {
        s.push_str(&format!("\t_ \"{i}\"\n"));
    }
    s.push_str(")\n");
    s
}

/// The `k8s.io/*` modules that k8s.io/kubernetes's own go.mod requires at `v0.0.0`.
fn staging_modules() -> Result<Vec<String>, Error> {
    eprintln!("testenv: resolving the staging modules of k8s.io/kubernetes {KUBERNETES_VERSION}");
    let out = go()
        .args(["mod", "download", "-json"])
        .arg(format!("k8s.io/kubernetes@{KUBERNETES_VERSION}"))
        .current_dir(std::env::temp_dir())
        .output()
        .map_err(|e| Error::io("running go mod download".into(), e))?;
    if !out.status.success() {
        return Err(Error::Build {
            what: format!("k8s.io/kubernetes {KUBERNETES_VERSION}"),
            detail: proxy_hint(
                &String::from_utf8_lossy(&out.stdout),
                &String::from_utf8_lossy(&out.stderr),
            ),
        });
    }
    let info: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| Error::Build {
            what: "k8s.io/kubernetes module information".into(),
            detail: format!("go mod download printed JSON that does not parse: {e}"),
        })?;
    let go_mod_path = info["GoMod"].as_str().ok_or_else(|| Error::Build {
        what: "k8s.io/kubernetes module information".into(),
        detail: "go mod download did not name the module's go.mod".into(),
    })?;
    let text = fs::read_to_string(go_mod_path)
        .map_err(|e| Error::io(format!("reading {go_mod_path}"), e))?;
    let modules = parse_staging_modules(&text);
    if modules.is_empty() {
        return Err(Error::Build {
            what: format!("k8s.io/kubernetes {KUBERNETES_VERSION}"),
            detail: format!(
                "{go_mod_path} requires no k8s.io module at v0.0.0; the recipe no longer fits this release"
            ),
        });
    }
    Ok(modules)
}

fn parse_staging_modules(go_mod: &str) -> Vec<String> {
    let mut modules: Vec<String> = go_mod
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            match (words.next(), words.next(), words.next()) {
                (Some(m), Some("v0.0.0"), None) if m.starts_with("k8s.io/") => Some(m.to_string()),
                (Some("require"), Some(m), Some("v0.0.0")) if m.starts_with("k8s.io/") => {
                    Some(m.to_string())
                }
                _ => None,
            }
        })
        .collect();
    modules.sort();
    modules.dedup();
    modules
}

fn go() -> Command {
    let mut cmd = Command::new("go");
    // GOTOOLCHAIN=local: never download another toolchain behind the user's back.
    cmd.env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=mod")
        .env("CGO_ENABLED", "0");
    cmd
}

fn check_go() -> Result<(), Error> {
    let out = match go().args(["env", "GOVERSION"]).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            return Err(Error::GoMissing(format!(
                "`go env GOVERSION` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Err(e) => return Err(Error::GoMissing(format!("`go` could not be run: {e}"))),
    };
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match parse_go_version(&version) {
        Some(v) if v >= MINIMUM_GO => Ok(()),
        _ => Err(Error::GoMissing(format!(
            "found {version}, but building kube-apiserver {KUBERNETES_VERSION} needs go{}.{} or newer",
            MINIMUM_GO.0, MINIMUM_GO.1
        ))),
    }
}

fn parse_go_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.strip_prefix("go")?.split(['.', '-', ' ']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

fn proxy_hint(stdout: &str, stderr: &str) -> String {
    let text = format!("{}\n{}", stdout.trim(), stderr.trim());
    format!(
        "{}\nThe Go module proxy must be reachable (GOPROXY is `{}`); check the network or set GOPROXY.",
        text.trim(),
        std::env::var("GOPROXY").unwrap_or_else(|_| "the default".into())
    )
}

fn build(recipe: &Recipe, target: &Path) -> Result<(), Error> {
    let dir = target.parent().unwrap_or(target).join("src");
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    fs::write(dir.join("go.mod"), &recipe.go_mod)
        .and_then(|_| fs::write(dir.join("tools.go"), &recipe.tools_go))
        .map_err(|e| Error::io(format!("writing the build module in {}", dir.display()), e))?;
    let _ = fs::remove_file(dir.join("go.sum"));

    let started = Instant::now();
    eprintln!(
        "testenv: building {} from the Go module proxy into {} (once; a cold build takes several minutes)",
        recipe.what,
        target.display()
    );
    run_step(
        recipe,
        &dir,
        "resolving modules",
        go().args(["mod", "tidy"]),
    )?;
    let partial = target.with_extension("partial");
    run_step(
        recipe,
        &dir,
        "compiling",
        go().args(["build", "-trimpath", "-ldflags", &recipe.ldflags, "-o"])
            .arg(&partial)
            .arg(&recipe.package),
    )?;
    // Rename last, so a build killed half-way never leaves a binary that looks complete.
    fs::rename(&partial, target)
        .map_err(|e| Error::io(format!("moving {} into place", target.display()), e))?;
    eprintln!(
        "testenv: built {} in {:.0?}",
        recipe.what,
        started.elapsed()
    );
    Ok(())
}

/// Runs one go command, echoing its progress lines and printing a heartbeat so a long
/// compile does not look like a hang.
fn run_step(recipe: &Recipe, dir: &Path, label: &str, cmd: &mut Command) -> Result<(), Error> {
    eprintln!("testenv: {}: {label}", recipe.what);
    let mut child = cmd
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(format!("running go for {}", recipe.what), e))?;
    let stderr = child.stderr.take();
    let what = recipe.what.clone();
    let echo = std::thread::spawn(move || {
        let mut tail = Vec::new();
        if let Some(stderr) = stderr {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.starts_with("go: downloading") {
                    eprintln!("testenv: {what}: {line}");
                }
                tail.push(line);
                if tail.len() > 40 {
                    tail.remove(0);
                }
            }
        }
        tail
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {
                std::thread::sleep(std::time::Duration::from_secs(1));
                let secs = started.elapsed().as_secs();
                if secs > 0 && secs.is_multiple_of(30) {
                    eprintln!("testenv: {}: still {label} ({secs}s)", recipe.what);
                }
            }
            Err(e) => return Err(Error::io(format!("waiting for go ({})", recipe.what), e)),
        }
    };
    let tail = echo.join().unwrap_or_default();
    if status.success() {
        Ok(())
    } else {
        Err(Error::Build {
            what: recipe.what.clone(),
            detail: proxy_hint("", &tail.join("\n")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_modules_are_the_v0_0_0_requirements() {
        let go_mod = "module k8s.io/kubernetes\n\nrequire (\n\tgithub.com/foo/bar v1.2.3\n\tk8s.io/api v0.0.0\n\tk8s.io/client-go v0.0.0\n\tk8s.io/klog/v2 v2.130.1\n)\nrequire k8s.io/kms v0.0.0\n";
        assert_eq!(
            parse_staging_modules(go_mod),
            vec!["k8s.io/api", "k8s.io/client-go", "k8s.io/kms"]
        );
    }

    #[test]
    fn go_versions_compare_by_major_and_minor() {
        assert_eq!(parse_go_version("go1.26.8"), Some((1, 26)));
        assert_eq!(parse_go_version("go1.27rc1"), None);
        assert_eq!(parse_go_version("go1.27"), Some((1, 27)));
        assert!(parse_go_version("go1.25.3").is_some_and(|v| v < MINIMUM_GO));
        assert_eq!(parse_go_version("devel"), None);
    }
}
