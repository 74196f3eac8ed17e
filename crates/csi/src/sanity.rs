//! csi-sanity (github.com/kubernetes-csi/csi-test), built once from the Go module proxy
//! into a versioned cache directory, the way the test environment builds kube-apiserver.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{CsiError, Result};

/// The csi-test release; its go.mod has no replace lines, so `go install pkg@version` works.
pub const CSI_TEST_VERSION: &str = "v5.6.0";
const PACKAGE: &str = "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity";

/// Where the binary lives under `cache`.
pub fn binary_path(cache: &Path) -> PathBuf {
    cache
        .join(format!("csi-sanity-{CSI_TEST_VERSION}"))
        .join("csi-sanity")
}

/// The `go install` that builds it into `gobin` (never downloading another toolchain).
pub fn build_command(gobin: &Path) -> Command {
    let mut c = Command::new("go");
    c.env("GOTOOLCHAIN", "local")
        .env("CGO_ENABLED", "0")
        .env("GOBIN", gobin)
        .args(["install", "-trimpath"])
        .arg(format!("{PACKAGE}@{CSI_TEST_VERSION}"));
    c
}

/// The csi-sanity binary, built under an exclusive file lock if it is missing.
pub fn ensure(cache: &Path) -> Result<PathBuf> {
    let bin = binary_path(cache);
    if bin.is_file() {
        return Ok(bin);
    }
    let dir = bin.parent().unwrap_or(cache).to_path_buf();
    fs::create_dir_all(&dir).map_err(|e| CsiError::io(format!("creating {}", dir.display()), e))?;
    let lock_path = cache.join("csi-sanity.lock");
    let lock = File::create(&lock_path)
        .map_err(|e| CsiError::io(format!("creating {}", lock_path.display()), e))?;
    if lock.try_lock().is_err() {
        eprintln!("csi-sanity: another process is building it; waiting");
        lock.lock()
            .map_err(|e| CsiError::io(format!("locking {}", lock_path.display()), e))?;
    }
    if bin.is_file() {
        return Ok(bin);
    }
    let partial = dir.join("partial");
    let _ = fs::remove_dir_all(&partial);
    eprintln!(
        "csi-sanity: building {PACKAGE}@{CSI_TEST_VERSION} from the Go module proxy into {} (once)",
        bin.display()
    );
    let out = build_command(&partial)
        .current_dir(&dir)
        .output()
        .map_err(|e| CsiError::Command {
            command: "go install".into(),
            detail: format!("could not run go ({e}); install Go 1.25 or newer"),
        })?;
    if !out.status.success() {
        return Err(CsiError::Command {
            command: format!("go install {PACKAGE}@{CSI_TEST_VERSION}"),
            detail: format!(
                "{}\nThe Go module proxy must be reachable (GOPROXY).",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    // Rename last, so an interrupted build never leaves a binary that looks complete.
    fs::rename(partial.join("csi-sanity"), &bin)
        .map_err(|e| CsiError::io(format!("moving {} into place", bin.display()), e))?;
    let _ = fs::remove_dir_all(&partial);
    drop(lock);
    Ok(bin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_pinned_and_local() {
        let c = build_command(Path::new("/cache/x"));
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            args,
            vec![
                "install",
                "-trimpath",
                "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@v5.6.0"
            ]
        );
        let envs: Vec<(String, String)> = c
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        assert!(envs.contains(&("GOTOOLCHAIN".into(), "local".into())));
        assert_eq!(
            binary_path(Path::new("/c")),
            PathBuf::from("/c/csi-sanity-v5.6.0/csi-sanity")
        );
    }
}
