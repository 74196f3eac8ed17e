//! Processors, memory and huge pages.

use std::collections::{BTreeMap, BTreeSet};

use super::Fs;
use super::util::number;
use crate::parse;
use crate::report::{Cpu, HugePagePool, Memory, NumaCpus, NumaHugePages, NumaMemory};

const CPU: &str = "/sys/devices/system/cpu";
const NODE: &str = "/sys/devices/system/node";

fn node_ids(fs: &dyn Fs) -> Vec<i32> {
    let mut ids: Vec<i32> = fs
        .read_dir(NODE)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.strip_prefix("node")?.parse().ok())
        .collect();
    ids.sort_unstable();
    ids
}

pub fn cpu(fs: &dyn Fs, unreadable: &mut Vec<String>) -> Cpu {
    let online = match fs.read_string(&format!("{CPU}/online")) {
        Ok(t) => parse::cpu_list(&t).unwrap_or_else(|e| {
            unreadable.push(format!("{CPU}/online: {e}"));
            Vec::new()
        }),
        Err(e) => {
            unreadable.push(format!("{CPU}/online: {e}"));
            Vec::new()
        }
    };
    let offline = fs
        .read_string(&format!("{CPU}/offline"))
        .ok()
        .and_then(|t| parse::cpu_list(&t).ok())
        .unwrap_or_default();
    // (package, core) of every online CPU: two threads of one core share the pair.
    let mut topo: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let mut missing = 0;
    for &c in &online {
        let dir = format!("{CPU}/cpu{c}/topology");
        match (
            number(fs, &format!("{dir}/physical_package_id")),
            number(fs, &format!("{dir}/core_id")),
        ) {
            (Some(p), Some(k)) => {
                topo.insert(c, (p, k));
            }
            _ => missing += 1,
        }
    }
    if missing > 0 {
        unreadable.push(format!(
            "the topology of {missing} online CPU(s) under {CPU}, so cores and sockets are undercounted"
        ));
    }
    let cores: BTreeSet<(u64, u64)> = topo.values().copied().collect();
    let sockets: BTreeSet<u64> = topo.values().map(|(p, _)| *p).collect();
    let mut per_core: BTreeMap<(u64, u64), u32> = BTreeMap::new();
    for v in topo.values() {
        *per_core.entry(*v).or_default() += 1;
    }
    let threads = per_core.values().copied().max().unwrap_or(0);
    let mut numa_nodes = Vec::new();
    for id in node_ids(fs) {
        let list = fs
            .read_string(&format!("{NODE}/node{id}/cpulist"))
            .ok()
            .and_then(|t| parse::cpu_list(&t).ok());
        let Some(list) = list else {
            unreadable.push(format!("{NODE}/node{id}/cpulist"));
            continue;
        };
        let cpus: Vec<u32> = list.into_iter().filter(|c| online.contains(c)).collect();
        let node_cores: BTreeSet<(u64, u64)> =
            cpus.iter().filter_map(|c| topo.get(c).copied()).collect();
        numa_nodes.push(NumaCpus {
            node: id,
            physical_cores: u32::try_from(node_cores.len()).unwrap_or(u32::MAX),
            online_cpus: cpus,
        });
    }
    Cpu {
        online_cpus: u32::try_from(online.len()).unwrap_or(u32::MAX),
        offline_cpus: u32::try_from(offline.len()).unwrap_or(u32::MAX),
        physical_cores: u32::try_from(cores.len()).unwrap_or(u32::MAX),
        sockets: u32::try_from(sockets.len()).unwrap_or(u32::MAX),
        threads_per_core: threads,
        hyper_threading: threads > 1,
        numa_nodes,
    }
}

pub fn memory(fs: &dyn Fs, unreadable: &mut Vec<String>) -> (Memory, Vec<HugePagePool>) {
    let info = match fs.read_string("/proc/meminfo") {
        Ok(t) => parse::meminfo(&t),
        Err(e) => {
            unreadable.push(format!("/proc/meminfo: {e}"));
            BTreeMap::new()
        }
    };
    let get = |k: &str| info.get(k).copied().unwrap_or(0);
    let mut numa_nodes = Vec::new();
    for id in node_ids(fs) {
        match fs.read_string(&format!("{NODE}/node{id}/meminfo")) {
            Ok(t) => {
                let m = parse::meminfo(&t);
                numa_nodes.push(NumaMemory {
                    node: id,
                    total_bytes: m.get("MemTotal").copied().unwrap_or(0),
                    free_bytes: m.get("MemFree").copied().unwrap_or(0),
                });
            }
            Err(e) => unreadable.push(format!("{NODE}/node{id}/meminfo: {e}")),
        }
    }
    let pools = huge_pages(fs, unreadable);
    let huge_bytes = pools
        .iter()
        .map(|p| p.total.saturating_mul(p.size_bytes))
        .fold(0u64, u64::saturating_add);
    let memory = Memory {
        total_bytes: get("MemTotal"),
        free_bytes: get("MemFree"),
        available_bytes: get("MemAvailable"),
        huge_pages_bytes: huge_bytes,
        swap_total_bytes: get("SwapTotal"),
        swap_free_bytes: get("SwapFree"),
        numa_nodes,
    };
    (memory, pools)
}

fn huge_pages(fs: &dyn Fs, unreadable: &mut Vec<String>) -> Vec<HugePagePool> {
    const DIR: &str = "/sys/kernel/mm/hugepages";
    let Ok(sizes) = fs.read_dir(DIR) else {
        unreadable.push(format!("{DIR}: the huge-page pools"));
        return Vec::new();
    };
    let nodes = node_ids(fs);
    let mut pools = Vec::new();
    for dir in sizes {
        let Some(size) = parse::huge_page_dir(&dir) else {
            continue;
        };
        let (Some(total), Some(free)) = (
            number(fs, &format!("{DIR}/{dir}/nr_hugepages")),
            number(fs, &format!("{DIR}/{dir}/free_hugepages")),
        ) else {
            unreadable.push(format!("{DIR}/{dir}"));
            continue;
        };
        let numa_nodes = nodes
            .iter()
            .filter_map(|&id| {
                let base = format!("{NODE}/node{id}/hugepages/{dir}");
                Some(NumaHugePages {
                    node: id,
                    total: number(fs, &format!("{base}/nr_hugepages"))?,
                    free: number(fs, &format!("{base}/free_hugepages"))?,
                })
            })
            .collect();
        pools.push(HugePagePool {
            size_bytes: size,
            total,
            free,
            numa_nodes,
        });
    }
    pools
}
