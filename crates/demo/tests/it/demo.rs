//! The README's demo command works: run it once and read what it prints.

use std::process::Command;

fn columns(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

#[test]
fn the_demo_discovers_deploys_and_ends_online() {
    let out = Command::new(env!("CARGO_BIN_EXE_simplyblock-demo"))
        .args(["--once", "--time-scale", "50"])
        .output()
        .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the demo failed:\n{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();

    // The chart's ControlPlane and SimplyblockDriver, installed by the operator.
    let installed: Vec<&str> = lines
        .iter()
        .filter(|l| l.starts_with("simplyblock "))
        .copied()
        .collect();
    assert_eq!(
        installed.len(),
        2,
        "no ControlPlane and driver in:\n{stdout}"
    );
    assert_eq!(columns(installed[0])[1], "Available", "{}", installed[0]);
    assert_eq!(columns(installed[1])[1], "Ready", "{}", installed[1]);

    // A tenant's StorageCluster outside the served namespace is refused, saying where.
    assert!(
        stdout.contains("Error from server (Forbidden): ")
            && stdout.contains("StorageCluster objects belong in namespace simplyblock"),
        "{stdout}"
    );

    // The operator reached the management API and the storage nodes with its client
    // certificates, never without.
    for api in ["management API calls", "storage-node API calls"] {
        let calls = lines
            .iter()
            .find(|l| l.starts_with(api))
            .unwrap_or_else(|| panic!("no {api} in:\n{stdout}"));
        assert!(
            calls.contains(" as simplyblock-operator") && !calls.contains("no certificate"),
            "{calls}"
        );
    }

    // The metrics API answers through the API server with the reference's columns, and a
    // pool's reading gives its capacity.
    let header = lines
        .iter()
        .find(|l| l.starts_with("NAME") && l.contains("WORKER") && l.contains("USED%"))
        .unwrap_or_else(|| panic!("no storage-node metrics table in:\n{stdout}"));
    assert_eq!(
        columns(header),
        [
            "NAME", "WORKER", "CLUSTER", "TOTAL", "USED", "USED%", "SAMPLED"
        ]
    );
    assert!(
        lines.iter().any(|l| l.starts_with("pool ")
            && l.contains(" used of ")
            && l.contains(" provisioned (")),
        "no pool capacity in:\n{stdout}"
    );

    // Discovery ran and wrote a draft, shown with the CRD's printer columns.
    let run = lines
        .iter()
        .find(|l| l.starts_with("initial-discovery"))
        .unwrap_or_else(|| panic!("no discovery run in:\n{stdout}"));
    assert_eq!(&columns(run)[1..3], ["Discover", "Succeeded"], "{run}");
    let header = lines
        .iter()
        .find(|l| l.starts_with("NAME") && l.contains("APPROVED"))
        .unwrap_or_else(|| panic!("no document table in:\n{stdout}"));
    assert_eq!(
        columns(header),
        [
            "NAME", "APPROVED", "PHASE", "READY", "STEP", "CLUSTER", "AGE"
        ]
    );
    let draft = lines
        .iter()
        .find(|l| l.starts_with("discovered-initial-discovery "))
        .unwrap_or_else(|| panic!("no draft in:\n{stdout}"));
    assert_eq!(&columns(draft)[1..3], ["false", "Draft"], "{draft}");
    assert!(
        stdout.contains("review: ready for review: 3 worker(s)"),
        "{stdout}"
    );

    // The deployment ends with the cluster and every node Online.
    let last = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("cluster "))
        .unwrap_or_else(|| panic!("no summary in:\n{stdout}"));
    assert!(
        last.ends_with(
            ": Online (active); nodes: worker-1 Online, worker-2 Online, worker-3 Online"
        ),
        "{last}"
    );

    // A drive failed: the chart's alert fired on the operator's scraped metrics, for it.
    assert!(
        stdout.contains(
            "(the chart's files/prometheus/alerts.yaml over the scraped samples): SUCCESS"
        ) && stdout.contains("firing: SimplyblockDeviceFailed (the drive failed above)"),
        "no alert firing for the failed drive in:\n{stdout}"
    );

    // Day one: the default pool and its class, a volume through the driver, a rolling
    // restart that leaves it readable.
    let pool = lines
        .iter()
        .find(|l| l.starts_with("initial-discovery-default "))
        .unwrap_or_else(|| panic!("no default pool in:\n{stdout}"));
    assert_eq!(
        &columns(pool)[1..3],
        ["initial-discovery", "Ready"],
        "{pool}"
    );
    // A class name a person types: the cluster's, named after its discovery run.
    assert!(
        stdout.contains("$ kubectl get storageclass simplyblock-initial-discovery\n"),
        "{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("volume ") && l.contains(" (1073741824 bytes, ")),
        "no volume in:\n{stdout}"
    );
    // The driver's plugins reached the control plane at the endpoint the operator
    // published, with the certificate their SimplyblockDriver mounts.
    let to_the_end = lines
        .iter()
        .find(|l| l.starts_with("management API calls to the end"))
        .unwrap_or_else(|| panic!("no count of the driver's calls in:\n{stdout}"));
    assert!(to_the_end.contains(" as simplyblock-csi"), "{to_the_end}");
    let restart = lines
        .iter()
        .find(|l| l.starts_with("initial-discovery-rolling-restart "))
        .unwrap_or_else(|| panic!("no rolling restart in the operations table:\n{stdout}"));
    assert_eq!(
        &columns(restart)[1..4],
        ["initial-discovery", "RollingRestart", "Succeeded"],
        "{restart}"
    );
    assert!(
        stdout.contains(": Node 3/3 ("),
        "the restart's progress names each node:\n{stdout}"
    );
    // One storage node shut down and restarted, and another removed, through
    // StorageNodeOps, all recorded (the table is printed after each: its last rows count).
    let node_ops: std::collections::BTreeMap<&str, Vec<&str>> = lines
        .iter()
        .map(|l| columns(l))
        .filter(|c| c.len() > 3 && ["Shutdown", "Restart", "Remove"].contains(&c[2]))
        .map(|c| (c[0], c))
        .collect();
    let actions: Vec<&str> = node_ops.values().map(|c| c[2]).collect();
    assert_eq!(actions.len(), 3, "the StorageNodeOps table:\n{stdout}");
    for row in node_ops.values() {
        assert_eq!(row[3], "Succeeded", "{row:?}");
    }
    // A cordon opens a maintenance window that holds the node offline until the uncordon.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("-maintenance Running/AwaitingHost: worker ")),
        "the maintenance window:\n{stdout}"
    );
    assert!(
        stdout.contains("is online again"),
        "the window closed:\n{stdout}"
    );
    // The removal drained the node of the volume first.
    assert!(
        lines.iter().any(
            |l| l.starts_with("drained: 1 of 1 volume(s) moved; volume ")
                && l.ends_with(" is removed")
        ),
        "the drained removal:\n{stdout}"
    );
    // Mounted where the machine can attach loop devices (CI runs as root).
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")
        .is_ok()
    {
        assert!(
            stdout.contains("still reads: written by the simplyblock demo into volume "),
            "{stdout}"
        );
        // The backup act: the file overwritten after the backup, the restored claim reads
        // what the backup was taken of.
        assert!(
            stdout.contains("$ cat hello.txt\nwritten by the simplyblock demo into volume "),
            "the restored claim's read:\n{stdout}"
        );
        // The disaster-recovery act: site B reads the replica of what site A wrote, and
        // site A reads back what site B wrote after the failback.
        assert!(
            stdout.contains(" (site B)\nwritten by the simplyblock demo into volume "),
            "site B's read:\n{stdout}"
        );
        assert!(
            stdout.contains("written on site B after the failover\n")
                && stdout
                    .contains(" (site A, after the failback)\nwritten by the simplyblock demo"),
            "site A's read after the failback:\n{stdout}"
        );
        assert!(
            stdout
                .contains(" (the bubble on site B)\nwritten by the simplyblock demo into volume "),
            "the drill's clone read in its bubble:\n{stdout}"
        );
    }
    // Disaster recovery: both sites in the CSI secret, replication, a planned failover
    // and a failback through the csi-addons verbs.
    assert!(
        lines.iter().any(|l| l.starts_with("the CSI secret lists ")
            && l.matches(", ").count() == 1
            && l.contains(" (local)")),
        "the CSI secret's clusters:\n{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("replicating to site B: last sync 20")),
        "replication to B:\n{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" on site A is FailedOver; its replica ")),
        "the failover:\n{stdout}"
    );
    // The drill: Ready with a recovery point on site B, no write to site A, torn down.
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("the drill's recovery point: snapshot ")
                && l.ends_with("invariants held: true")),
        "the drill's report:\n{stdout}"
    );
    assert!(
        lines.contains(&"site A received no write from the drill, and serves on")
            && lines
                .iter()
                .any(|l| l.starts_with("the drill is deleted: ")),
        "the drill's isolation and teardown:\n{stdout}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("replicating back to site A: last sync 20")),
        "replication back to A:\n{stdout}"
    );

    // The backup act: the policy Active on one claim, its backup Available, the restore
    // Succeeded into a new claim bound to the restored volume.
    let row = |prefix: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(prefix))
            .map(|l| columns(l))
            .unwrap_or_else(|| panic!("no row {prefix} in:\n{stdout}"))
    };
    assert_eq!(
        &row("demo-every-15m ")[2..6],
        ["Active", "True", "15m,4", "1"]
    );
    assert_eq!(row("pvc-demo-restore ")[3], "Succeeded");
    assert_eq!(&row("pvc-demo-restored ")[1..2], ["Bound"]);

    // The upgrade act: preflight refused the running operation, then both stages ran and
    // the operator adopted the cluster without creating it.
    assert!(
        lines.iter().any(|l| l
            .starts_with("refused: [in-flight-operation] StorageClusterOps/prod-rolling-restart")),
        "preflight's refusal:\n{stdout}"
    );
    assert!(
        stdout.contains("Verdict: nothing blocks the upgrade")
            && stdout.contains("stage upgrade → Validating")
            && stdout.contains("stage migrate → Completed"),
        "the upgrade's stages:\n{stdout}"
    );
    let stored = lines
        .iter()
        .find_map(|l| l.strip_prefix("stored versions: "))
        .unwrap_or_else(|| panic!("no stored versions in:\n{stdout}"));
    assert_eq!(stored.split(", ").count(), 7, "{stored}");
    assert!(
        stored.split(", ").all(|crd| crd.ends_with(" [v1alpha2]")),
        "{stored}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("StorageNode/prod-nodes-")
                && l.ends_with(" at v1alpha2: cluster prod, 8 vCPUs, owned by StorageCluster/prod"))
            .count(),
        2,
        "the migrated nodes:\n{stdout}"
    );
    assert!(
        lines.iter().any(
            |l| l.starts_with("the operator adopted StorageCluster/prod (nqn.")
                && l.ends_with("cluster creates in its call log: 1")
        ),
        "the adoption:\n{stdout}"
    );
}
