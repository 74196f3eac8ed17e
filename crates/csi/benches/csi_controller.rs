//! CreateVolume and DeleteVolume through the driver against an in-process, zero-latency
//! sbsim: latency (p50/p99) and throughput, and the driver's own overhead per call (the
//! driver's latency minus the same control-plane calls made directly). Prints figures;
//! asserts nothing about time. Run: `cargo bench -p simplyblock-csi --bench csi_controller`.

#[path = "../tests/it/common.rs"]
mod common;

use std::time::{Duration, Instant};

use common::*;
use simplyblock_controlplane::VolumeCreate;
use simplyblock_csi::proto::csi::v1 as csi;
use simplyblock_csi::proto::csi::v1::controller_client::ControllerClient;
use tonic::transport::Channel;

const N: usize = 200;
const PARALLEL: usize = 8;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(what: &str, mut d: Vec<Duration>) -> Duration {
    d.sort();
    let mean = d.iter().sum::<Duration>() / d.len() as u32;
    println!(
        "{what:<34} n={:<4} p50={:>8.3} ms  p99={:>8.3} ms  mean={:>8.3} ms",
        d.len(),
        pct(&d, 0.50).as_secs_f64() * 1e3,
        pct(&d, 0.99).as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
    );
    mean
}

fn create_req(name: String, sim: &Sbsim) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name,
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 30,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![csi::VolumeCapability {
            access_mode: Some(csi::volume_capability::AccessMode {
                mode: csi::volume_capability::access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
        }],
        parameters: sim.params(),
        ..Default::default()
    }
}

async fn throughput(ctl: &ControllerClient<Channel>, sim: &Sbsim, prefix: &str) -> (f64, f64) {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..PARALLEL {
        let mut c = ctl.clone();
        let reqs: Vec<_> = (0..N / PARALLEL)
            .map(|i| create_req(format!("{prefix}-{t}-{i}"), sim))
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for r in reqs {
                let v = c.create_volume(r).await.expect("create").into_inner();
                ids.push(v.volume.expect("volume").volume_id);
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.expect("join"));
    }
    let creates = ids.len() as f64 / start.elapsed().as_secs_f64();
    let start = Instant::now();
    let chunks: Vec<Vec<String>> = ids
        .chunks(ids.len().div_ceil(PARALLEL))
        .map(|c| c.to_vec())
        .collect();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let mut c = ctl.clone();
        tasks.push(tokio::spawn(async move {
            for id in chunk {
                c.delete_volume(csi::DeleteVolumeRequest {
                    volume_id: id,
                    ..Default::default()
                })
                .await
                .expect("delete");
            }
        }));
    }
    for t in tasks {
        t.await.expect("join");
    }
    (creates, ids.len() as f64 / start.elapsed().as_secs_f64())
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sim = sbsim(3).await;
        let dir = tempfile::tempdir().expect("tempdir");
        let driver = DriverProc::start(dir.path(), &[sim.entry()], &sim.files, Default::default()).await;
        let (_, mut ctl, _) = driver.clients().await;
        // Warm up connections and caches.
        for i in 0..10 {
            let v = ctl.create_volume(create_req(format!("warm-{i}"), &sim)).await.expect("warm");
            ctl.delete_volume(csi::DeleteVolumeRequest {
                volume_id: v.into_inner().volume.expect("v").volume_id,
                ..Default::default()
            })
            .await
            .expect("warm delete");
        }

        println!("simplyblock-csi controller benchmark: {N} volumes of 1 GiB, zero-latency sbsim in-process, unix socket");
        // Each driver call is paired with the same control-plane calls made directly (pool
        // lookup by name, create, read back, connect; the delete), interleaved so that
        // background work in sbsim (deletes finishing) weighs on both alike.
        let c = &sim.client;
        let (mut creates, mut ids) = (Vec::new(), Vec::new());
        let (mut dcreates, mut dids) = (Vec::new(), Vec::new());
        for i in 0..N {
            let t = Instant::now();
            let v = ctl
                .create_volume(create_req(format!("bench-{i}"), &sim))
                .await
                .expect("create");
            creates.push(t.elapsed());
            ids.push(v.into_inner().volume.expect("volume").volume_id);
            let t = Instant::now();
            let pool = c
                .find_pool(sim.cluster, &sim.pool_name)
                .await
                .expect("pool")
                .expect("some");
            let id = c
                .create_volume(
                    sim.cluster,
                    pool.id,
                    &VolumeCreate {
                        max_namespace_per_subsys: Some(1),
                        ..VolumeCreate::new(format!("direct-{i}"), 1 << 30)
                    },
                )
                .await
                .expect("create");
            c.get_volume(sim.cluster, pool.id, id).await.expect("get");
            c.connect_volume(sim.cluster, pool.id, id, None)
                .await
                .expect("connect");
            dcreates.push(t.elapsed());
            dids.push(id);
        }
        let (mut deletes, mut ddeletes) = (Vec::new(), Vec::new());
        for (id, did) in ids.into_iter().zip(dids) {
            let t = Instant::now();
            ctl.delete_volume(csi::DeleteVolumeRequest {
                volume_id: id,
                ..Default::default()
            })
            .await
            .expect("delete");
            deletes.push(t.elapsed());
            let t = Instant::now();
            c.delete_volume(sim.cluster, sim.pool, did)
                .await
                .expect("delete");
            ddeletes.push(t.elapsed());
        }
        let c_mean = report("CreateVolume (driver)", creates);
        let d_mean = report("DeleteVolume (driver)", deletes);
        let dc_mean = report("same create calls, direct", dcreates);
        let dd_mean = report("same delete call, direct", ddeletes);
        let over = |a: Duration, b: Duration| (a.as_secs_f64() - b.as_secs_f64()) * 1e3;
        println!("driver overhead per CreateVolume    {:>8.3} ms (mean, driver minus direct)", over(c_mean, dc_mean));
        println!("driver overhead per DeleteVolume    {:>8.3} ms (mean, driver minus direct)", over(d_mean, dd_mean));

        let (cps, dps) = throughput(&ctl, &sim, "tp").await;
        println!("throughput, {PARALLEL} concurrent callers: CreateVolume {cps:>7.1}/s  DeleteVolume {dps:>7.1}/s");
        drop(ctl);
        driver.stop().await;
    });
}
