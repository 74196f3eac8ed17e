//! What a kubelet does for one container of a pod, enough to run the container's program on
//! this machine as the pod would: each volume the container mounts is made a directory
//! under a root of the caller's (a Secret's or ConfigMap's keys as files, in the kubelet's
//! layout: the files behind a `..data` link that an update swaps), the container's
//! environment is resolved, `$(VAR)` references stay for the program's parser, and every
//! path under a mount in the arguments is rewritten to where that volume is.
//!
//! ```no_run
//! # async fn example(client: kube::Client, set: k8s_openapi::api::apps::v1::DaemonSet) {
//! let pod = set.spec.template.spec.unwrap_or_default();
//! let root = std::path::Path::new("node-plugin");
//! let c = simplyblock_testenv::kubelet::mount(&client, "ns", &pod, "csi-node", "worker-1", root)
//!     .await
//!     .expect("mounted");
//! // c.args, c.env: what the container's program is started with.
//! # }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{ConfigMap, Container, KeyToPath, PodSpec, Secret, Volume};
use kube::api::Api;

use crate::Error;

/// A container as its kubelet would start it, its volumes under `root`.
pub struct Mounted {
    client: kube::Client,
    namespace: String,
    root: PathBuf,
    /// Each volume the container mounts, with its mount path in the container.
    volumes: Vec<(Volume, String)>,
    /// The arguments, paths under a mount rewritten.
    pub args: Vec<String>,
    /// The environment, each value resolved.
    pub env: Vec<(String, String)>,
}

fn failed(what: String) -> Error {
    Error::Kubelet(what)
}

/// Mounts the volumes of `container` of `pod` (in `namespace`, scheduled on `node`) under
/// `root`, one directory per volume, and resolves its arguments and environment.
pub async fn mount(
    client: &kube::Client,
    namespace: &str,
    pod: &PodSpec,
    container: &str,
    node: &str,
    root: &Path,
) -> Result<Mounted, Error> {
    let c: &Container = pod
        .containers
        .iter()
        .find(|c| c.name == container)
        .ok_or_else(|| failed(format!("the pod has no container {container}")))?;
    let mut volumes = Vec::new();
    for m in c.volume_mounts.iter().flatten() {
        let volume = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .ok_or_else(|| {
                failed(format!(
                    "container {container} mounts volume {}, which the pod does not have",
                    m.name
                ))
            })?;
        volumes.push((volume.clone(), m.mount_path.clone()));
    }
    let mut env = Vec::new();
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("spec.nodeName") => node.to_owned(),
                Some("metadata.namespace") => namespace.to_owned(),
                _ => {
                    return Err(failed(format!(
                        "variable {} of container {container} comes from a source not resolved here",
                        e.name
                    )));
                }
            },
            (None, None) => String::new(),
        };
        env.push((e.name.clone(), value));
    }
    let mounted = Mounted {
        client: client.clone(),
        namespace: namespace.to_owned(),
        root: root.to_path_buf(),
        args: Vec::new(),
        env,
        volumes,
    };
    let args = c
        .args
        .iter()
        .flatten()
        .map(|a| mounted.rewrite(a))
        .collect();
    mounted.refresh().await?;
    Ok(Mounted { args, ..mounted })
}

impl Mounted {
    /// Where volume `name` is on this machine.
    pub fn volume_dir(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    fn rewrite(&self, arg: &str) -> String {
        let mounts: Vec<(&str, &str)> = self
            .volumes
            .iter()
            .map(|(v, path)| (v.name.as_str(), path.as_str()))
            .collect();
        rewrite(arg, &mounts, &self.root)
    }

    /// Writes every volume's content as it is now, as the kubelet does on start and again
    /// after a Secret or ConfigMap it mounts changed: a Secret's or ConfigMap's files are
    /// replaced all at once.
    pub async fn refresh(&self) -> Result<(), Error> {
        for (volume, _) in &self.volumes {
            let dir = self.volume_dir(&volume.name);
            let io = |what: &str, e: std::io::Error| {
                Error::io(
                    format!("{what} {} for volume {}", dir.display(), volume.name),
                    e,
                )
            };
            std::fs::create_dir_all(&dir).map_err(|e| io("creating", e))?;
            let files = if let Some(s) = &volume.secret {
                let name = s.secret_name.clone().unwrap_or_default();
                let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
                let found = api.get_opt(&name).await.map_err(|e| {
                    failed(format!(
                        "reading Secret {name} for volume {}: {e}",
                        volume.name
                    ))
                })?;
                let data = found.map(|s| {
                    s.data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.0))
                        .collect()
                });
                Some(project(
                    &volume.name,
                    &format!("Secret {name}"),
                    data,
                    s.items.as_deref(),
                    s.optional.unwrap_or(false),
                )?)
            } else if let Some(m) = &volume.config_map {
                let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
                let found = api.get_opt(&m.name).await.map_err(|e| {
                    failed(format!(
                        "reading ConfigMap {} for volume {}: {e}",
                        m.name, volume.name
                    ))
                })?;
                let data = found.map(|c| {
                    let mut all: BTreeMap<String, Vec<u8>> = c
                        .data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes()))
                        .collect();
                    all.extend(
                        c.binary_data
                            .unwrap_or_default()
                            .into_iter()
                            .map(|(k, v)| (k, v.0)),
                    );
                    all
                });
                Some(project(
                    &volume.name,
                    &format!("ConfigMap {}", m.name),
                    data,
                    m.items.as_deref(),
                    m.optional.unwrap_or(false),
                )?)
            } else if volume.empty_dir.is_some() || volume.host_path.is_some() {
                // A directory of its own, in place of the node's.
                None
            } else {
                return Err(failed(format!(
                    "volume {} is of a kind not mounted here",
                    volume.name
                )));
            };
            if let Some(files) = files {
                write_atomically(&dir, &files).map_err(|e| io("writing", e))?;
            }
        }
        Ok(())
    }
}

/// `arg` with a path under a mount (volume name, mount path) rewritten to the volume's
/// directory under `root`: the longest mount path that starts a path in `arg` (at the
/// start, or after `=`, `:` or `/`) and ends at a `/` or the end.
fn rewrite(arg: &str, mounts: &[(&str, &str)], root: &Path) -> String {
    let mut mounts = mounts.to_vec();
    mounts.sort_by_key(|(_, path)| std::cmp::Reverse(path.len()));
    for (volume, path) in mounts {
        let path = path.trim_end_matches('/');
        let mut from = 0;
        while let Some(found) = arg[from..].find(path) {
            let at = from + found;
            let end = at + path.len();
            let starts = at == 0 || matches!(arg.as_bytes()[at - 1], b'=' | b':' | b'/');
            let ends = end == arg.len() || arg.as_bytes()[end] == b'/';
            if starts && ends {
                return format!(
                    "{}{}{}",
                    &arg[..at],
                    root.join(volume).display(),
                    &arg[end..]
                );
            }
            from = at + 1;
        }
    }
    arg.to_owned()
}

/// The files a volume of `data` shows: every key, or only `items` (each at its path). A
/// missing object, or a missing key of `items`, is an error unless `optional`.
fn project(
    volume: &str,
    what: &str,
    data: Option<BTreeMap<String, Vec<u8>>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let Some(data) = data else {
        return if optional {
            Ok(BTreeMap::new())
        } else {
            Err(failed(format!(
                "{what} of volume {volume} does not exist: the pod would wait for it"
            )))
        };
    };
    let Some(items) = items else {
        return Ok(data);
    };
    let mut out = BTreeMap::new();
    for item in items {
        match data.get(&item.key) {
            Some(bytes) => {
                out.insert(item.path.clone(), bytes.clone());
            }
            None if optional => {}
            None => {
                return Err(failed(format!(
                    "{what} of volume {volume} has no key {}: the pod would wait for it",
                    item.key
                )));
            }
        }
    }
    Ok(out)
}

/// The kubelet's atomic writer: the files go into a new hidden directory, `..data` is
/// swapped to it by a rename, and each file is a link through `..data`, so a reader sees
/// the old set or the new one, never a mix.
fn write_atomically(dir: &Path, files: &BTreeMap<String, Vec<u8>>) -> std::io::Result<()> {
    use std::os::unix::fs::symlink;
    static VERSION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let version = format!(
        "..{}_{}",
        std::process::id(),
        VERSION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let fresh = dir.join(&version);
    std::fs::create_dir_all(&fresh)?;
    for (path, bytes) in files {
        let file = fresh.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(file, bytes)?;
    }
    let data = dir.join("..data");
    let previous = std::fs::read_link(&data).ok();
    let swap = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&swap);
    symlink(&version, &swap)?;
    std::fs::rename(&swap, &data)?;
    for path in files.keys() {
        let top = path.split('/').next().unwrap_or(path);
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new("..data").join(top), &link)?;
        }
    }
    if let Some(previous) = previous.filter(|p| *p != Path::new(&version)) {
        let _ = std::fs::remove_dir_all(dir.join(previous));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_swaps_every_file_at_once_behind_the_same_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = |ca: &str| {
            BTreeMap::from([
                ("ca.crt".to_owned(), ca.as_bytes().to_vec()),
                ("tls.key".to_owned(), b"key".to_vec()),
            ])
        };
        write_atomically(dir.path(), &files("first")).expect("write");
        let ca = dir.path().join("ca.crt");
        assert_eq!(std::fs::read_to_string(&ca).expect("read"), "first");
        let inode = |p: &Path| {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(p).expect("metadata").ino()
        };
        let before = inode(&ca);
        write_atomically(dir.path(), &files("second")).expect("write");
        assert_eq!(std::fs::read_to_string(&ca).expect("read"), "second");
        assert_ne!(inode(&ca), before, "a new file behind the same path");
        let hidden: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("..") && n != "..data")
            .collect();
        assert_eq!(
            hidden.len(),
            1,
            "the previous version is removed: {hidden:?}"
        );
    }

    #[test]
    fn paths_under_a_mount_are_rewritten_to_its_volume() {
        let root = Path::new("/r");
        let mounts = [
            ("socket-dir", "/csi"),
            ("csi-secret", "/etc/spdkcsi-secret"),
            ("ca", "/etc/x/ca"),
            ("x", "/etc/x"),
        ];
        let r = |a: &str| rewrite(a, &mounts, root);
        assert_eq!(
            r("--endpoint=unix:///csi/csi.sock"),
            "--endpoint=unix:///r/socket-dir/csi.sock"
        );
        assert_eq!(
            r("--secret-file=/etc/spdkcsi-secret/secret.json"),
            "--secret-file=/r/csi-secret/secret.json"
        );
        assert_eq!(
            r("--ca-file=/etc/x/ca/ca.crt"),
            "--ca-file=/r/ca/ca.crt",
            "the longest mount"
        );
        assert_eq!(r("--f=/etc/x/other"), "--f=/r/x/other");
        assert_eq!(
            r("--state-dir=/var/csi"),
            "--state-dir=/var/csi",
            "not under /csi"
        );
        assert_eq!(r("--f=/csix"), "--f=/csix");
        assert_eq!(r("--mode=node"), "--mode=node");
    }

    #[test]
    fn items_project_only_their_keys_and_a_missing_one_is_said() {
        let data = BTreeMap::from([
            ("ca.crt".to_owned(), b"CA".to_vec()),
            ("tls.key".to_owned(), b"KEY".to_vec()),
        ]);
        let items = [KeyToPath {
            key: "ca.crt".into(),
            path: "bundle.pem".into(),
            ..KeyToPath::default()
        }];
        let out =
            project("v", "Secret s", Some(data.clone()), Some(&items), false).expect("projected");
        assert_eq!(
            out,
            BTreeMap::from([("bundle.pem".to_owned(), b"CA".to_vec())])
        );
        let missing = [KeyToPath {
            key: "other".into(),
            path: "other".into(),
            ..KeyToPath::default()
        }];
        let e =
            project("v", "Secret s", Some(data), Some(&missing), false).expect_err("missing key");
        assert!(e.to_string().contains("no key other"), "{e}");
        assert!(project("v", "Secret s", None, None, true).is_ok());
        assert!(project("v", "Secret s", None, None, false).is_err());
    }
}
