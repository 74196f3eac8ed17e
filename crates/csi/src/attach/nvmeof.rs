//! The NVMe-oF attacher: connects every path the control plane publishes by writing an
//! option string to `/dev/nvme-fabrics` (what `nvme connect` does), finds the namespace's
//! block device by subsystem NQN in sysfs (native multipath gives one device for all
//! paths), and disconnects the controllers on detach.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use simplyblock_controlplane::ConnectEntry;
use uuid::Uuid;

use super::{Attacher, PathState, Target};
use crate::error::{CsiError, Result};

/// The node's own controller-loss timeout (seconds), not the control plane's.
pub const DEFAULT_CTRL_LOSS_TMO: i64 = 1800;
/// Backstop per connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(40);
const DEVICE_WAIT: Duration = Duration::from_secs(30);
/// `EALREADY`: the kernel already has this exact controller.
const EALREADY: i32 = 114;

#[derive(Debug, Clone)]
pub struct NvmeofAttacher {
    pub sys: PathBuf,
    pub fabrics: PathBuf,
    /// The host id sent with the node's own host NQN; `None` derives it from the NQN
    /// ([`host_id_for`]).
    pub host_id: Option<Uuid>,
}

impl Default for NvmeofAttacher {
    fn default() -> Self {
        Self {
            sys: PathBuf::from("/sys"),
            fabrics: PathBuf::from("/dev/nvme-fabrics"),
            host_id: None,
        }
    }
}

/// Credentials and flags carried only in the control plane's `nvme connect` command line.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ConnectAuth {
    pub dhchap_secret: Option<String>,
    pub dhchap_ctrl_secret: Option<String>,
    pub hostnqn: Option<String>,
    pub hostid: Option<String>,
    pub tls: bool,
}

impl std::fmt::Debug for ConnectAuth {
    // The DH-HMAC-CHAP secrets never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectAuth")
            .field(
                "dhchap_secret",
                &self.dhchap_secret.as_ref().map(|_| "<redacted>"),
            )
            .field(
                "dhchap_ctrl_secret",
                &self.dhchap_ctrl_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("hostnqn", &self.hostnqn)
            .field("hostid", &self.hostid)
            .field("tls", &self.tls)
            .finish()
    }
}

/// The NVMe host id that goes with a host NQN. The kernel keeps one host per
/// (hostnqn, hostid) pair and refuses a connect whose hostnqn or hostid another pair
/// already holds, which a custom hostnqn sent with the default hostid runs into. A
/// `…:uuid:<uuid>` NQN (ours carry the Node's UID) pairs with that UUID, as nvme-cli
/// pairs `/etc/nvme/hostnqn` with `/etc/nvme/hostid`; any other NQN gets a UUID derived
/// from its text, the same on every connect and every restart.
pub fn host_id_for(host_nqn: &str) -> Uuid {
    host_nqn
        .rsplit_once(":uuid:")
        .and_then(|(_, u)| Uuid::parse_str(u).ok())
        .unwrap_or_else(|| crate::handle::uuid_for_name(host_nqn))
}

/// Parse `--flag=value` and `--flag value` forms out of a connect command line.
pub fn parse_connect_auth(line: &str) -> ConnectAuth {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut a = ConnectAuth::default();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) => (f, Some(v.to_string())),
            None => (w, None),
        };
        let mut value = || {
            inline.clone().or_else(|| {
                let v = words.get(i + 1).filter(|v| !v.starts_with('-'))?;
                i += 1;
                Some(v.to_string())
            })
        };
        match flag {
            "--dhchap-secret" | "-S" => a.dhchap_secret = value(),
            "--dhchap-ctrl-secret" | "-C" => a.dhchap_ctrl_secret = value(),
            "--hostnqn" | "-q" => a.hostnqn = value(),
            "--hostid" | "-I" => a.hostid = value(),
            "--tls" => a.tls = true,
            _ => {}
        }
        i += 1;
    }
    a
}

/// The option string written to `/dev/nvme-fabrics` for one path. The host is the
/// connect line's `--hostnqn` if it names one, else the node's; its id is the line's
/// `--hostid`, else `host_id` when the host is the node's own, else derived from the NQN.
/// A value that could split the string is refused before anything is written
/// ([`fabrics_value`]).
pub fn fabrics_options(
    e: &ConnectEntry,
    nqn: &str,
    host_nqn: &str,
    host_id: Option<Uuid>,
) -> Result<String> {
    let auth = parse_connect_auth(&e.connect);
    let transport = if e.transport.is_empty() {
        "tcp".to_string()
    } else {
        e.transport.to_ascii_lowercase()
    };
    let nqn = if e.nqn.is_empty() {
        nqn
    } else {
        e.nqn.as_str()
    };
    let host = auth.hostnqn.as_deref().unwrap_or(host_nqn);
    let path = format!("{}:{}", e.ip, e.port);
    let opt = |key: &str, value: &str| fabrics_value(&path, key, value);
    let mut o = vec![
        opt("nqn", nqn)?,
        opt("transport", &transport)?,
        opt("traddr", &e.ip)?,
        format!("trsvcid={}", e.port),
    ];
    if !host.is_empty() {
        o.push(opt("hostnqn", host)?);
        let id = match (&auth.hostid, host_id) {
            (Some(line), _) => line.clone(),
            (None, Some(own)) if host == host_nqn => own.to_string(),
            _ => host_id_for(host).to_string(),
        };
        o.push(opt("hostid", &id)?);
    }
    if !e.host_iface.is_empty() {
        o.push(opt("host_iface", &e.host_iface)?);
    }
    if e.nr_io_queues > 0 {
        o.push(format!("nr_io_queues={}", e.nr_io_queues));
    }
    if e.reconnect_delay > 0 {
        o.push(format!("reconnect_delay={}", e.reconnect_delay));
    }
    o.push(format!("ctrl_loss_tmo={DEFAULT_CTRL_LOSS_TMO}"));
    if e.fast_io_fail_tmo > 0 {
        o.push(format!("fast_io_fail_tmo={}", e.fast_io_fail_tmo));
    }
    if e.keep_alive_tmo > 0 {
        o.push(format!("keep_alive_tmo={}", e.keep_alive_tmo));
    }
    if e.tls || auth.tls {
        o.push("tls".into());
    }
    if let Some(s) = &auth.dhchap_secret {
        o.push(opt("dhchap_secret", s)?);
    }
    if let Some(s) = &auth.dhchap_ctrl_secret {
        o.push(opt("dhchap_ctrl_secret", s)?);
    }
    Ok(o.join(","))
}

/// One `key=value` of the fabrics option string. The kernel splits the string at `,` and
/// newlines and reads it as a C string, so a value carrying one of those, a NUL, or any
/// other control character or space would end its option early and add options of its
/// choosing (a `traddr` of `10.0.0.1,hostnqn=…` connects as another host). An `=` is
/// refused too, except in DH-HMAC-CHAP secrets: their base64 ends in `=` padding, and the
/// kernel takes a key's value from its first `=`.
fn fabrics_value(path: &str, key: &str, value: &str) -> Result<String> {
    let secret = key.starts_with("dhchap");
    let bad = value
        .chars()
        .find(|c| *c == ',' || (*c == '=' && !secret) || c.is_whitespace() || c.is_control());
    let Some(c) = bad else {
        return Ok(format!("{key}={value}"));
    };
    let shown = if secret {
        String::new()
    } else {
        format!(" ({value:?})")
    };
    Err(CsiError::FailedPrecondition(format!(
        "the {key} the control plane gives for path {path}{shown} contains {c:?}, which would \
         split the /dev/nvme-fabrics option string into options of its own; the path was not \
         connected: correct the value in the control plane"
    )))
}

/// The controller instance in the kernel's answer (`instance=3,cntlid=1`).
pub fn parse_fabrics_reply(reply: &str) -> Option<u32> {
    reply
        .trim()
        .split(',')
        .find_map(|kv| kv.strip_prefix("instance="))
        .and_then(|v| v.trim().parse().ok())
}

/// One fabrics controller as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Controller {
    pub name: String,
    pub nqn: String,
    pub traddr: String,
    pub trsvcid: String,
    pub state: String,
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Parse `traddr=10.0.0.1,trsvcid=4420,src_addr=…`.
pub fn parse_address(a: &str) -> (String, String) {
    let mut addr = String::new();
    let mut port = String::new();
    for kv in a.trim().split(',') {
        if let Some(v) = kv.strip_prefix("traddr=") {
            addr = v.to_string();
        } else if let Some(v) = kv.strip_prefix("trsvcid=") {
            port = v.to_string();
        }
    }
    (addr, port)
}

/// Controllers of subsystem `nqn` under `<sys>/class/nvme`.
pub fn controllers(sys: &Path, nqn: &str) -> Vec<Controller> {
    let Ok(rd) = std::fs::read_dir(sys.join("class/nvme")) else {
        return Vec::new();
    };
    let mut out: Vec<Controller> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let p = e.path();
            let c_nqn = read(&p.join("subsysnqn"));
            if c_nqn != nqn {
                return None;
            }
            let (traddr, trsvcid) = parse_address(&read(&p.join("address")));
            Some(Controller {
                name: e.file_name().to_string_lossy().into_owned(),
                nqn: c_nqn,
                traddr,
                trsvcid,
                state: read(&p.join("state")),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The paths the controllers of one subsystem make: a controller being deleted is no
/// path any more; one the kernel is reconnecting (`connecting`, `resetting`) is held but
/// carries no I/O.
pub fn path_states(c: Vec<Controller>) -> Vec<PathState> {
    c.into_iter()
        .filter(|c| c.state != "deleting")
        .map(|c| PathState {
            port: c.trsvcid.parse().unwrap_or(0),
            ip: c.traddr,
            live: c.state == "live",
        })
        .collect()
}

/// Order for disconnecting: paths that are not live first, so I/O keeps its best path
/// until last.
pub fn disconnect_order(mut c: Vec<Controller>) -> Vec<Controller> {
    c.sort_by_key(|x| (x.state == "live", x.name.clone()));
    c
}

/// The namespace block devices of subsystem `nqn`: `(device name, nsid)` from
/// `<sys>/class/nvme-subsystem/*/`.
pub fn namespaces(sys: &Path, nqn: &str) -> Vec<(String, u32)> {
    let Ok(rd) = std::fs::read_dir(sys.join("class/nvme-subsystem")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for s in rd.filter_map(|e| e.ok()) {
        if read(&s.path().join("subsysnqn")) != nqn {
            continue;
        }
        let Ok(inner) = std::fs::read_dir(s.path()) else {
            continue;
        };
        for n in inner.filter_map(|e| e.ok()) {
            let name = n.file_name().to_string_lossy().into_owned();
            // Namespace heads are nvme<S>n<N>; controllers (nvme<C>) have no 'n' part.
            let is_ns = name
                .strip_prefix("nvme")
                .is_some_and(|r| r.contains('n') && !r.contains('c'));
            if !is_ns {
                continue;
            }
            let nsid = read(&n.path().join("nsid")).parse().unwrap_or(0);
            out.push((name, nsid));
        }
    }
    out.sort();
    out
}

/// The device for `(nqn, ns_id)`; `ns_id` 0 means the only namespace.
pub fn device_for(sys: &Path, nqn: &str, ns_id: u32) -> Option<PathBuf> {
    let ns = namespaces(sys, nqn);
    let hit = if ns_id == 0 {
        (ns.len() == 1).then(|| ns[0].0.clone())
    } else {
        ns.iter()
            .find(|(_, id)| *id == ns_id)
            .map(|(n, _)| n.clone())
    };
    hit.map(|n| PathBuf::from(format!("/dev/{n}")))
}

/// Where a connect through `/dev/nvme-fabrics` failed: the device could not be opened (the
/// node is not prepared), or the kernel refused or failed the connect itself.
#[derive(Debug)]
enum FabricsError {
    Open(std::io::Error),
    Connect(std::io::Error),
}

fn write_fabrics(fabrics: &Path, options: &str) -> Result<Option<u32>, FabricsError> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(fabrics)
        .map_err(FabricsError::Open)?;
    match f.write_all(options.as_bytes()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(EALREADY) => return Ok(None),
        Err(e) => return Err(FabricsError::Connect(e)),
    }
    let mut reply = String::new();
    f.read_to_string(&mut reply)
        .map_err(FabricsError::Connect)?;
    Ok(parse_fabrics_reply(&reply))
}

/// The cause of, and the remedy for, `/dev/nvme-fabrics` failing to open with `kind`, where
/// one is known.
fn open_cause(kind: std::io::ErrorKind) -> Option<&'static str> {
    match kind {
        std::io::ErrorKind::NotFound => Some(
            "the nvme-fabrics and nvme-tcp kernel modules are not loaded on this node (the device \
             appears when they are): run `modprobe nvme-tcp` on the node and add nvme-tcp and \
             nvme-fabrics to /etc/modules-load.d/ so they load at boot; `simplyblock-operator \
             preflight` checks a node for them",
        ),
        std::io::ErrorKind::PermissionDenied => Some(
            "the node plugin may not open it: its container must run privileged with the host's \
             /dev mounted, as the SimplyblockDriver's DaemonSet does; check that nothing (a \
             securityContext override, an SELinux or AppArmor policy) takes that away",
        ),
        _ => None,
    }
}

/// The cause of the kernel refusing a connect with `kind`, where one is known.
fn connect_cause(kind: std::io::ErrorKind) -> Option<&'static str> {
    match kind {
        // EINVAL: a bad option, or a transport the kernel cannot load.
        std::io::ErrorKind::InvalidInput => Some(
            "the kernel refused the options; its log (`dmesg`) says why, and \
             \"no handler found for transport tcp\" there means nvme-tcp cannot be loaded on this node",
        ),
        _ => None,
    }
}

/// The error of a failed connect through `fabrics` with `options` (secrets masked).
fn fabrics_error(fabrics: &Path, options: &str, err: FabricsError) -> CsiError {
    let (doing, cause, source) = match err {
        FabricsError::Open(e) => ("opening", open_cause(e.kind()), e),
        FabricsError::Connect(e) => ("connecting through", connect_cause(e.kind()), e),
    };
    let what = format!("{doing} {} ({})", fabrics.display(), redact(options));
    match cause {
        Some(cause) => CsiError::FailedPrecondition(format!("{what}: {source}: {cause}")),
        None => CsiError::Io { what, source },
    }
}

/// Options with secrets masked, for logs and errors.
fn redact(options: &str) -> String {
    options
        .split(',')
        .map(|kv| match kv.split_once('=') {
            Some((k, _)) if k.starts_with("dhchap") => format!("{k}=***"),
            _ => kv.to_string(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl NvmeofAttacher {
    async fn connect_path(&self, t: &Target, e: &ConnectEntry) -> Result<()> {
        let nqn = if e.nqn.is_empty() { &t.nqn } else { &e.nqn };
        let port = e.port.to_string();
        if controllers(&self.sys, nqn)
            .iter()
            .any(|c| c.traddr == e.ip && c.trsvcid == port && c.state != "deleting")
        {
            return Ok(());
        }
        let options = fabrics_options(e, &t.nqn, &t.host_nqn, self.host_id)?;
        let fabrics = self.fabrics.clone();
        let opts = options.clone();
        let job = tokio::task::spawn_blocking(move || write_fabrics(&fabrics, &opts));
        match tokio::time::timeout(CONNECT_TIMEOUT, job).await {
            Ok(Ok(Ok(_))) => Ok(()),
            Ok(Ok(Err(err))) => Err(fabrics_error(&self.fabrics, &options, err)),
            Ok(Err(err)) => Err(CsiError::Internal(format!("connect task: {err}"))),
            Err(_) => Err(CsiError::Internal(format!(
                "connecting {}:{} did not finish within {CONNECT_TIMEOUT:?}",
                e.ip, e.port
            ))),
        }
    }
}

impl Attacher for NvmeofAttacher {
    fn kind(&self) -> &'static str {
        "nvmeof"
    }

    fn attach<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<PathBuf>> {
        async move {
            if t.paths.is_empty() {
                return Err(CsiError::FailedPrecondition(format!(
                    "the control plane publishes no path for volume {}",
                    t.volume
                )));
            }
            // Primary first; one failed path is tolerated while another connects.
            let mut errors = Vec::new();
            for p in &t.paths {
                if let Err(e) = self.connect_path(t, p).await {
                    tracing::warn!(volume = %t.volume, addr = %p.ip, error = %e, "path did not connect");
                    errors.push(e.to_string());
                }
            }
            if errors.len() == t.paths.len() {
                return Err(CsiError::Internal(format!(
                    "no path of volume {} connected: {}",
                    t.volume,
                    errors.join("; ")
                )));
            }
            let start = Instant::now();
            loop {
                if let Some(d) = device_for(&self.sys, &t.nqn, t.ns_id) {
                    return Ok(d);
                }
                if start.elapsed() > DEVICE_WAIT {
                    return Err(CsiError::Internal(format!(
                        "connected to {} but no namespace {} appeared within {DEVICE_WAIT:?}",
                        t.nqn, t.ns_id
                    )));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        .boxed()
    }

    fn find<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<Option<PathBuf>>> {
        async move { Ok(device_for(&self.sys, &t.nqn, t.ns_id)) }.boxed()
    }

    fn detach<'a>(&'a self, t: &'a Target, _device: &'a Path) -> BoxFuture<'a, Result<()>> {
        async move {
            // A shared subsystem still serves other volumes' namespaces: leave it.
            if namespaces(&self.sys, &t.nqn).len() > 1 {
                return Ok(());
            }
            for c in disconnect_order(controllers(&self.sys, &t.nqn)) {
                let p = self
                    .sys
                    .join("class/nvme")
                    .join(&c.name)
                    .join("delete_controller");
                match std::fs::write(&p, "1") {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(CsiError::io(format!("disconnecting {}", c.name), e)),
                }
            }
            Ok(())
        }
        .boxed()
    }

    fn paths<'a>(&'a self, t: &'a Target) -> BoxFuture<'a, Result<Vec<PathState>>> {
        async move { Ok(path_states(controllers(&self.sys, &t.nqn))) }.boxed()
    }

    fn connect_paths<'a>(
        &'a self,
        t: &'a Target,
        paths: &'a [ConnectEntry],
    ) -> BoxFuture<'a, Result<()>> {
        async move {
            let mut errors = Vec::new();
            for p in paths {
                if let Err(e) = self.connect_path(t, p).await {
                    errors.push(format!("{}:{}: {e}", p.ip, p.port));
                }
            }
            if errors.is_empty() {
                Ok(())
            } else {
                Err(CsiError::Internal(format!(
                    "reconnecting paths of volume {}: {}",
                    t.volume,
                    errors.join("; ")
                )))
            }
        }
        .boxed()
    }

    fn refresh_size<'a>(&'a self, _t: &'a Target, _device: &'a Path) -> BoxFuture<'a, Result<()>> {
        // The controller reports the namespace's new size by itself (an AEN).
        async move { Ok(()) }.boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ip: &str) -> ConnectEntry {
        ConnectEntry {
            transport: "TCP".into(),
            ip: ip.into(),
            port: 4420,
            nqn: "nqn.2023-02.io.simplyblock:c:lvol:v".into(),
            reconnect_delay: 2,
            ctrl_loss_tmo: 3600,
            fast_io_fail_tmo: 0,
            nr_io_queues: 4,
            keep_alive_tmo: 5,
            connect: "sudo nvme connect --reconnect-delay=2 --ctrl-loss-tmo=3600 --nr-io-queues=4 \
                      --keep-alive-tmo=5 --transport=tcp --traddr=10.0.0.1 --trsvcid=4420 \
                      --nqn=nqn.2023-02.io.simplyblock:c:lvol:v --hostnqn=nqn.h:1 \
                      --dhchap-secret=DHHC-1:00:abc: --dhchap-ctrl-secret DHHC-1:00:def:"
                .into(),
            ..Default::default()
        }
    }

    #[test]
    fn auth_is_read_from_the_connect_line() {
        let a = parse_connect_auth(&entry("x").connect);
        assert_eq!(a.dhchap_secret.as_deref(), Some("DHHC-1:00:abc:"));
        assert_eq!(a.dhchap_ctrl_secret.as_deref(), Some("DHHC-1:00:def:"));
        assert_eq!(a.hostnqn.as_deref(), Some("nqn.h:1"));
        assert!(!a.tls);
        assert!(parse_connect_auth("nvme connect --tls -a x").tls);
        assert_eq!(parse_connect_auth(""), ConnectAuth::default());
    }

    #[test]
    fn fabrics_options_use_the_node_ctrl_loss_and_the_line_credentials() {
        // The line names its own host: its id is derived from that NQN, not the node's.
        let o = fabrics_options(
            &entry("10.0.0.1"),
            "ignored",
            "nqn.node",
            Some(Uuid::from_u128(7)),
        )
        .expect("options");
        assert_eq!(
            o,
            format!(
                "nqn=nqn.2023-02.io.simplyblock:c:lvol:v,transport=tcp,traddr=10.0.0.1,trsvcid=4420,\
                 hostnqn=nqn.h:1,hostid={},nr_io_queues=4,reconnect_delay=2,ctrl_loss_tmo=1800,\
                 keep_alive_tmo=5,dhchap_secret=DHHC-1:00:abc:,dhchap_ctrl_secret=DHHC-1:00:def:",
                host_id_for("nqn.h:1")
            )
        );
        assert!(!redact(&o).contains("abc"));
        let bare = ConnectEntry {
            ip: "1.2.3.4".into(),
            port: 4420,
            ..Default::default()
        };
        assert_eq!(
            fabrics_options(&bare, "nqn.x", "nqn.node", None).expect("options"),
            format!(
                "nqn=nqn.x,transport=tcp,traddr=1.2.3.4,trsvcid=4420,hostnqn=nqn.node,hostid={},ctrl_loss_tmo=1800",
                host_id_for("nqn.node")
            )
        );
    }

    #[test]
    fn the_host_id_pairs_with_the_host_nqn() {
        // Regression: a custom hostnqn went out with the kernel's default hostid, which
        // kernels that keep one host per (hostnqn, hostid) refuse.
        let uid = "3f0e3a52-7b1c-4e39-9d6e-0c1e1d2f3a4b";
        let node = crate::handle::host_nqn(uid);
        assert_eq!(host_id_for(&node).to_string(), uid);
        let bare = ConnectEntry {
            ip: "1.2.3.4".into(),
            port: 4420,
            ..Default::default()
        };
        assert!(
            fabrics_options(&bare, "nqn.x", &node, None)
                .expect("options")
                .contains(&format!(",hostid={uid},")),
            "the Node UID in the host NQN is the host id"
        );
        // A configured id wins for the node's own NQN.
        let own = Uuid::from_u128(9);
        assert!(
            fabrics_options(&bare, "nqn.x", &node, Some(own))
                .expect("options")
                .contains(&format!(",hostid={own},"))
        );
        // An NQN without a UUID gets a derived id, stable and distinct per NQN.
        assert_eq!(host_id_for("nqn.a"), host_id_for("nqn.a"));
        assert_ne!(host_id_for("nqn.a"), host_id_for("nqn.b"));
        // A --hostid on the control plane's line is sent as given.
        let lined = ConnectEntry {
            connect: "nvme connect --hostnqn=nqn.h:1 --hostid=abc-1".into(),
            ..bare
        };
        let o = fabrics_options(&lined, "nqn.x", &node, Some(own)).expect("options");
        assert!(o.contains(",hostnqn=nqn.h:1,hostid=abc-1,"), "{o}");
    }

    #[test]
    fn a_value_that_would_split_the_option_string_is_refused() {
        // Regression: values were joined unescaped, so a traddr of "10.0.0.1,hostnqn=…"
        // added an option of its own.
        let good = entry("10.0.0.1");
        let cases: Vec<(&str, ConnectEntry)> = vec![
            ("traddr", entry("10.0.0.1,hostnqn=nqn.other")),
            ("traddr", entry("10.0.0.1\nhostnqn=nqn.other")),
            ("traddr", entry("10.0.0.1\0")),
            (
                "nqn",
                ConnectEntry {
                    nqn: "nqn.x,tls".into(),
                    ..good.clone()
                },
            ),
            (
                "nqn",
                ConnectEntry {
                    nqn: "nqn.x=y".into(),
                    ..good.clone()
                },
            ),
            (
                "transport",
                ConnectEntry {
                    transport: "tcp,keyring=1".into(),
                    ..good.clone()
                },
            ),
            (
                "host_iface",
                ConnectEntry {
                    host_iface: "eth0 ,x".into(),
                    ..good.clone()
                },
            ),
            (
                "hostnqn",
                ConnectEntry {
                    connect: "nvme connect --hostnqn=nqn.h,hostid=1".into(),
                    ..good.clone()
                },
            ),
            (
                "hostid",
                ConnectEntry {
                    connect: "nvme connect --hostid=1d2,tls".into(),
                    ..good.clone()
                },
            ),
            (
                "dhchap_secret",
                ConnectEntry {
                    connect: "nvme connect --dhchap-secret=DHHC-1:00:abc:,hostnqn=nqn.x".into(),
                    ..good.clone()
                },
            ),
        ];
        for (key, e) in cases {
            let err = fabrics_options(&e, "nqn.x", "nqn.node", None).expect_err(key);
            assert!(
                matches!(err, CsiError::FailedPrecondition(_)),
                "{key}: {err}"
            );
            let text = err.to_string();
            assert!(text.contains(&format!("the {key} ")), "{key}: {text}");
            assert!(!text.contains("abc"), "a secret is never shown: {text}");
        }
        // The node's own host NQN is checked as well.
        let err = fabrics_options(
            &ConnectEntry {
                connect: String::new(),
                ..good.clone()
            },
            "nqn.x",
            "nqn.node,tls",
            None,
        )
        .expect_err("node host NQN");
        assert!(err.to_string().contains("the hostnqn "), "{err}");
        // base64 padding in a DH-HMAC-CHAP secret is not a separator.
        let padded = ConnectEntry {
            connect: "nvme connect --dhchap-secret=DHHC-1:03:YWJjZA==:".into(),
            ..good
        };
        let o = fabrics_options(&padded, "nqn.x", "nqn.node", None).expect("padded secret");
        assert!(o.ends_with(",dhchap_secret=DHHC-1:03:YWJjZA==:"), "{o}");
    }

    #[test]
    fn replies_and_addresses_parse() {
        assert_eq!(parse_fabrics_reply("instance=3,cntlid=1\n"), Some(3));
        assert_eq!(parse_fabrics_reply("garbage"), None);
        assert_eq!(
            parse_address("traddr=10.0.0.1,trsvcid=4420,src_addr=10.0.0.9\n"),
            ("10.0.0.1".into(), "4420".into())
        );
    }

    #[test]
    fn sysfs_is_searched_by_nqn() {
        let sys = tempfile::tempdir().expect("tmp");
        let w = |p: &str, v: &str| {
            let path = sys.path().join(p);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, format!("{v}\n")).expect("write");
        };
        let nqn = "nqn.2023-02.io.simplyblock:c:lvol:v";
        for (c, addr, state) in [
            ("nvme0", "10.0.0.1", "live"),
            ("nvme1", "10.0.0.2", "connecting"),
        ] {
            w(&format!("class/nvme/{c}/subsysnqn"), nqn);
            w(
                &format!("class/nvme/{c}/address"),
                &format!("traddr={addr},trsvcid=4420"),
            );
            w(&format!("class/nvme/{c}/state"), state);
        }
        w("class/nvme/nvme2/subsysnqn", "nqn.other");
        w("class/nvme-subsystem/nvme-subsys0/subsysnqn", nqn);
        w("class/nvme-subsystem/nvme-subsys0/nvme0n1/nsid", "1");
        std::fs::create_dir_all(sys.path().join("class/nvme-subsystem/nvme-subsys0/nvme0"))
            .expect("ctrl dir");
        w("class/nvme-subsystem/nvme-subsys1/subsysnqn", "nqn.other");
        w("class/nvme-subsystem/nvme-subsys1/nvme2n1/nsid", "1");

        let cs = controllers(sys.path(), nqn);
        assert_eq!(cs.len(), 2);
        let order: Vec<String> = disconnect_order(cs).into_iter().map(|c| c.name).collect();
        assert_eq!(order, vec!["nvme1", "nvme0"], "the live path goes last");
        assert_eq!(namespaces(sys.path(), nqn), vec![("nvme0n1".into(), 1)]);
        assert_eq!(
            device_for(sys.path(), nqn, 0),
            Some(PathBuf::from("/dev/nvme0n1"))
        );
        assert_eq!(
            device_for(sys.path(), nqn, 1),
            Some(PathBuf::from("/dev/nvme0n1"))
        );
        assert_eq!(device_for(sys.path(), nqn, 2), None);
        assert_eq!(device_for(sys.path(), "nqn.none", 0), None);
    }

    #[tokio::test]
    async fn a_node_without_the_nvme_modules_is_told_to_load_them() {
        let dir = tempfile::tempdir().expect("dir");
        // Without nvme-fabrics loaded the kernel has no /dev/nvme-fabrics.
        let attacher = NvmeofAttacher {
            sys: dir.path().join("sys"),
            fabrics: dir.path().join("nvme-fabrics"),
            host_id: None,
        };
        let target = Target {
            cluster: Uuid::from_u128(1),
            volume: Uuid::from_u128(2),
            nqn: "nqn.2023-02.io.simplyblock:c:lvol:v".into(),
            ns_id: 1,
            paths: vec![entry("10.0.0.1")],
            host_nqn: "nqn.node".into(),
        };
        let err = attacher
            .attach(&target)
            .await
            .expect_err("no device to open");
        let message = err.to_string();
        assert!(message.contains("No such file or directory"), "{message}");
        assert!(
            message.contains("kernel modules are not loaded on this node")
                && message.contains("`modprobe nvme-tcp`")
                && message.contains("/etc/modules-load.d/"),
            "{message}"
        );
        assert!(
            !message.contains("DHHC-1:00:abc:"),
            "a secret leaked: {message}"
        );
    }

    #[test]
    fn fabrics_errors_name_their_cause_where_one_is_known() {
        use std::io::{Error, ErrorKind};
        let path = Path::new("/dev/nvme-fabrics");
        let options = "nqn=n,transport=tcp,dhchap_secret=s3cret";
        let message = |e: FabricsError| fabrics_error(path, options, e).to_string();

        let denied = message(FabricsError::Open(Error::from(ErrorKind::PermissionDenied)));
        assert!(
            denied.starts_with("opening /dev/nvme-fabrics ("),
            "{denied}"
        );
        assert!(denied.contains("must run privileged"), "{denied}");
        assert!(!denied.contains("s3cret"), "{denied}");

        let refused = message(FabricsError::Connect(Error::from(ErrorKind::InvalidInput)));
        assert!(refused.contains("dmesg"), "{refused}");

        // No known cause: the error as it came, as an I/O failure.
        let other = fabrics_error(
            path,
            options,
            FabricsError::Connect(Error::from(ErrorKind::ConnectionRefused)),
        );
        assert!(matches!(other, CsiError::Io { .. }), "{other:?}");
        assert!(
            other
                .to_string()
                .starts_with("connecting through /dev/nvme-fabrics")
        );
    }
}
