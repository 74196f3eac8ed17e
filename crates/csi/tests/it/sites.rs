//! Two sites in one sbsim: cluster A on workers w1, w2 and cluster B on w3, w4, each with a
//! pool and a replication target towards the other, and drivers whose CSI secret lists
//! both clusters with `local` on the driver's own site.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use simplyblock_controlplane::{
    Client, ClusterCreate, ClusterStatus, NodeStatus, PoolCreate, ReplicationStart,
    ReplicationTargetCreate, StorageNodeAdd, Uuid, VolumeCreate, VolumeStatus,
};
use simplyblock_csi::clusters::ClusterEntry;
use simplyblock_simulator::{Server, Sim, SimConfig};

use crate::common::*;

/// One site: its cluster, its credential, its pool, and its target towards the other.
#[derive(Debug, Clone)]
pub struct Site {
    pub cluster: Uuid,
    pub secret: String,
    pub pool: Uuid,
    pub target: Uuid,
}

pub struct TwoSites {
    pub server: Server,
    pub client: Client,
    pub a: Site,
    pub b: Site,
    pub files: PathBuf,
    pub dir: tempfile::TempDir,
}

/// sbsim with four enrolled workers w1..w4 and volume files.
async fn four_workers(seed: u64) -> (Server, Client, PathBuf, tempfile::TempDir) {
    simplyblock_simulator::install_crypto_provider();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut fleet = String::from("workers:\n");
    for i in 1..=4 {
        fleet.push_str(&format!(
            "  - hostname: w{i}\n    addresses: [10.10.0.{i}]\n    devices: {{count: 2, size: 2T}}\n    labels: {{node-restriction.kubernetes.io/simplyblock-storage-node: c1}}\n"
        ));
    }
    let fleet_path = dir.path().join("fleet.yaml");
    std::fs::write(&fleet_path, fleet).expect("fleet");
    let files = dir.path().join("volumes");
    let config = SimConfig {
        tokens: vec![TOKEN.into()],
        time_scale: 1000.0,
        fleet: Some(fleet_path),
        seed,
        volume_files: Some(files.clone()),
        ..SimConfig::new(dir.path().join("state"))
    };
    let server = Server::start(Sim::open(config).expect("sim"), "127.0.0.1:0", None)
        .await
        .expect("sbsim");
    let client = client_for(&server.url);
    (server, client, files, dir)
}

fn address(worker: &str) -> String {
    format!("{worker}.simplyblock-storage-node-api.simplyblock.svc.cluster.local:5000")
}

pub async fn two_sites() -> TwoSites {
    let (server, client, files, dir) = four_workers(11).await;
    let mut sites = Vec::new();
    for (name, workers) in [("site-a", ["w1", "w2"]), ("site-b", ["w3", "w4"])] {
        sites.push(site(&client, name, workers).await);
    }
    let (a, b) = (sites[0].clone(), sites[1].clone());
    let mut s = TwoSites {
        server,
        client,
        a,
        b,
        files,
        dir,
    };
    let ab = target(&s.client, &s.a, &s.b).await;
    let ba = target(&s.client, &s.b, &s.a).await;
    s.a.target = ab;
    s.b.target = ba;
    s
}

/// One cluster stretched over two sites for synchronous replication: `east` on w1, w2
/// and `west` on w3, w4.
pub struct Stretched {
    pub server: Server,
    pub client: Client,
    pub cluster: Uuid,
    pub secret: String,
    pub pool: Uuid,
    pub east: Vec<Uuid>,
    pub west: Vec<Uuid>,
    pub files: PathBuf,
    pub dir: tempfile::TempDir,
}

pub async fn stretched() -> Stretched {
    let (server, client, files, dir) = four_workers(13).await;
    let c = &client;
    let cluster = c
        .create_cluster(&ClusterCreate {
            sync_replication: true,
            ..ClusterCreate::new("stretched", 10, 4)
        })
        .await
        .expect("cluster");
    let mut sites = Vec::new();
    for (site, workers) in [("east", ["w1", "w2"]), ("west", ["w3", "w4"])] {
        for w in workers {
            c.add_storage_node(
                cluster.id,
                &StorageNodeAdd {
                    site: Some(site.into()),
                    ..StorageNodeAdd::new(address(w), "eth0")
                },
            )
            .await
            .expect("node add");
        }
        let before: Vec<Uuid> = sites.iter().flatten().copied().collect();
        let nodes = eventually("the site's nodes online", || async {
            let nodes = c.list_storage_nodes(cluster.id).await.ok()?;
            let new: Vec<Uuid> = nodes
                .iter()
                .filter(|n| !before.contains(&n.id) && n.status == NodeStatus::Online)
                .map(|n| n.id)
                .collect();
            (new.len() == 2).then_some(new)
        })
        .await;
        sites.push(nodes);
    }
    c.activate_cluster(cluster.id).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: "stretched-pool".into(),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    let west = sites.pop().expect("west");
    let east = sites.pop().expect("east");
    Stretched {
        cluster: cluster.id,
        secret: cluster.secret.expose().to_owned(),
        pool: pool.id,
        east,
        west,
        server,
        client,
        files,
        dir,
    }
}

impl Stretched {
    /// A driver whose secret lists the one cluster, local to it.
    pub async fn driver(&self, dir: &Path) -> DriverProc {
        let entry = ClusterEntry {
            cluster_id: self.cluster,
            cluster_endpoint: self.server.url.clone(),
            cluster_secret: self.secret.clone(),
            local: true,
        };
        DriverProc::start(dir, &[entry], &self.files, Default::default()).await
    }

    /// A mirrored volume served on east's first node; `group` makes it a member.
    pub async fn volume(&self, name: &str, group: Option<&str>) -> Uuid {
        self.client
            .create_volume(
                self.cluster,
                self.pool,
                &VolumeCreate {
                    host_id: Some(self.east[0].to_string()),
                    consistency_group: group.map(str::to_string),
                    ndcs: 1,
                    npcs: 1,
                    ..VolumeCreate::new(name, 1_000_000_000)
                },
            )
            .await
            .expect("volume")
    }

    pub async fn serving_node(&self, volume: Uuid) -> Uuid {
        self.client
            .get_volume(self.cluster, self.pool, volume)
            .await
            .expect("volume")
            .storage_node_id
    }
}

async fn site(c: &Client, name: &str, workers: [&str; 2]) -> Site {
    let cluster = c
        .create_cluster(&ClusterCreate::new(name, 10, 4))
        .await
        .expect("cluster");
    for w in workers {
        c.add_storage_node(cluster.id, &StorageNodeAdd::new(address(w), "eth0"))
            .await
            .expect("node add");
    }
    eventually("nodes online", || async {
        let n = c.list_storage_nodes(cluster.id).await.ok()?;
        (n.len() == 2 && n.iter().all(|x| x.status == NodeStatus::Online)).then_some(())
    })
    .await;
    c.activate_cluster(cluster.id).await.expect("activate");
    eventually("cluster active", || async {
        (c.get_cluster(cluster.id).await.ok()?.status == ClusterStatus::Active).then_some(())
    })
    .await;
    let pool = c
        .create_pool(
            cluster.id,
            &PoolCreate {
                name: format!("{name}-pool"),
                ..Default::default()
            },
        )
        .await
        .expect("pool");
    Site {
        cluster: cluster.id,
        secret: cluster.secret.expose().to_owned(),
        pool: pool.id,
        target: Uuid::nil(),
    }
}

async fn target(c: &Client, from: &Site, to: &Site) -> Uuid {
    c.create_replication_target(
        from.cluster,
        &ReplicationTargetCreate {
            target_name: format!("to-{}", to.cluster),
            target_cluster_id: to.cluster,
            target_pool_id: Some(to.pool),
            timeout_sec: None,
        },
    )
    .await
    .expect("target")
    .id
}

impl TwoSites {
    /// The CSI secret's entries: both clusters, `local` on `local`'s.
    pub fn entries(&self, local: Uuid) -> Vec<ClusterEntry> {
        [&self.a, &self.b]
            .into_iter()
            .map(|s| ClusterEntry {
                cluster_id: s.cluster,
                cluster_endpoint: self.server.url.clone(),
                cluster_secret: s.secret.clone(),
                local: s.cluster == local,
            })
            .collect()
    }

    /// A driver of the site of `local`, serving on a socket in `dir`.
    pub async fn driver(&self, dir: &Path, local: Uuid) -> DriverProc {
        DriverProc::start(dir, &self.entries(local), &self.files, Default::default()).await
    }

    pub fn site(&self, cluster: Uuid) -> &Site {
        if cluster == self.a.cluster {
            &self.a
        } else {
            &self.b
        }
    }

    pub fn other(&self, cluster: Uuid) -> &Site {
        if cluster == self.a.cluster {
            &self.b
        } else {
            &self.a
        }
    }

    /// The CSI handle of a volume of `site`.
    pub fn handle(&self, site: &Site, volume: Uuid) -> String {
        format!("{}:{}:{volume}", site.cluster, site.pool)
    }

    pub async fn volume(&self, site: &Site, name: &str) -> Uuid {
        self.client
            .create_volume(
                site.cluster,
                site.pool,
                &VolumeCreate::new(name, 1_000_000_000),
            )
            .await
            .expect("volume")
    }

    /// Start replicating `vol` of `site` towards the other site, trigger a snapshot and
    /// wait for the replica; returns it.
    pub async fn protect(&self, site: &Site, vol: Uuid) -> Uuid {
        let c = &self.client;
        let other = self.other(site.cluster).cluster;
        c.start_volume_replication(
            site.cluster,
            site.pool,
            vol,
            &ReplicationStart {
                replication_cluster_id: Some(other),
                ..Default::default()
            },
        )
        .await
        .expect("start replication");
        self.replica(site, vol).await
    }

    /// Trigger a snapshot of `vol` and wait for its replica; returns it.
    pub async fn replica(&self, site: &Site, vol: Uuid) -> Uuid {
        let c = &self.client;
        c.volume_replication_action(site.cluster, site.pool, vol, "trigger")
            .await
            .expect("trigger");
        eventually("the replica exists", || async {
            let r = c
                .volume_replication(site.cluster, site.pool, vol)
                .await
                .ok()?;
            r.target_lvol_id.filter(|_| r.is_source)
        })
        .await
    }

    /// Delete an old primary and wait until the control plane has reaped it.
    pub async fn reap(&self, site: &Site, vol: Uuid) {
        let c = &self.client;
        c.delete_volume(site.cluster, site.pool, vol)
            .await
            .expect("reap the old primary");
        eventually("the old primary is reaped", || async {
            let v = c.get_volume(site.cluster, site.pool, vol).await.ok()?;
            (v.status == VolumeStatus::Deleted).then_some(())
        })
        .await;
    }

    /// Freeze the sim clock: it moves only by [`TwoSites::advance`].
    pub fn freeze(&self) {
        self.server.sim.clock.set_scale(0.0);
    }

    /// Jump sim time forward and let the engine look again.
    pub fn advance(&self, seconds: f64) {
        self.server.sim.clock.advance((seconds * 1000.0) as i64);
        self.server.sim.wake.notify_one();
    }
}
