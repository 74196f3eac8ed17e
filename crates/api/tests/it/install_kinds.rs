//! The CEL rules, defaults and patterns of ControlPlane, ControlPlaneOps and
//! SimplyblockDriver, as the real API server applies them.

use crate::support::{create, dynamic, refusal, update};
use serde_json::{Value, json};
use simplyblock_api::{ControlPlane, ControlPlaneOps, SimplyblockDriver};

fn control_plane(name: &str, source: Value) -> Value {
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "ControlPlane",
        "metadata": {"name": name},
        "spec": {"source": source}
    })
}

fn local() -> Value {
    json!({"local": {"image": "quay.io/simplyblock-io/simplyblock:26.2.1"}})
}

fn managed(endpoint: &str) -> Value {
    json!({"managed": {"endpoint": endpoint}})
}

#[tokio::test]
async fn a_control_plane_is_one_named_simplyblock_with_one_source() {
    let (client, ns) = crate::support::namespace("cel-cp-source").await;
    let api = dynamic::<ControlPlane>(&client, &ns);

    let other_name = create(&api, control_plane("mine", local())).await;
    assert_eq!(
        refusal(other_name),
        [
            "<nil>: Invalid value: a ControlPlane must be named simplyblock: there is one per Kubernetes cluster"
        ]
    );
    let both = create(
        &api,
        control_plane(
            "simplyblock",
            json!({"local": local()["local"], "managed": managed("https://cp.example.com")["managed"]}),
        ),
    )
    .await;
    assert_eq!(
        refusal(both),
        [
            "spec.source: Invalid value: set exactly one of spec.source.local (the operator installs the control plane here) or spec.source.managed (it runs elsewhere)"
        ]
    );
    let neither = create(&api, control_plane("simplyblock", json!({}))).await;
    assert_eq!(refusal(neither).len(), 1);

    let created = create(&api, control_plane("simplyblock", local()))
        .await
        .expect("a local control plane");
    // Defaults: two API replicas, three FoundationDB processes, TLS and mTLS on.
    let l = &created.data["spec"]["source"]["local"];
    assert_eq!(l["replicas"], 2);
    assert_eq!(l["imagePullPolicy"], "IfNotPresent");
    assert_eq!(l["foundationDB"]["replicas"], 3);
    assert_eq!(l["tls"]["enableTLS"], true);
    assert_eq!(l["tls"]["enableMutualTLS"], true);
    assert_eq!(l["tls"]["provider"], "cert-manager");

    // The fields inside the chosen source stay editable; the choice does not.
    update(&api, "simplyblock", |cp| {
        cp["spec"]["source"]["local"]["replicas"] = json!(3)
    })
    .await
    .expect("editing inside the source");
    let switch = update(&api, "simplyblock", |cp| {
        cp["spec"]["source"] = managed("https://cp.example.com")
    })
    .await;
    assert_eq!(
        refusal(switch),
        [
            "spec.source: Invalid value: spec.source is immutable between local and managed: delete the ControlPlane and create it again to change where the control plane runs"
        ]
    );
}

#[tokio::test]
async fn a_managed_endpoint_must_be_routable() {
    let (client, ns) = crate::support::namespace("cel-cp-endpoint").await;
    let api = dynamic::<ControlPlane>(&client, &ns);
    for refused in [
        "https://localhost:8443",
        "https://127.0.0.1",
        "https://127.1.2.3:5000/",
        "https://[::1]:8443",
        "https://169.254.169.254",
        "https://[fe80::1]",
        // Every spelling a URL parser or inet_aton reads as loopback, link-local or
        // unspecified.
        "https://2130706433/",
        "https://0x7f000001:8443",
        "https://127.1",
        "https://0177.0.0.1",
        "https://LocalHost.",
        "https://api.localhost",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:7f00:1]",
        "https://[::127.0.0.1]",
        "https://[::ffff:169.254.169.254]",
        "https://2852039166",
        "https://0.0.0.0",
        "https://[::]",
        "https://0/",
    ] {
        let result = create(&api, control_plane("simplyblock", managed(refused))).await;
        assert_eq!(
            refusal(result),
            [format!(
                "spec.source.managed.endpoint: Invalid value: \"{refused}\": spec.source.managed.endpoint must not be a loopback, link-local or unspecified address, nor an IPv4 address spelled other than a.b.c.d: give the control plane's routable address"
            )],
            "{refused}"
        );
    }
    let not_a_url = create(
        &api,
        control_plane("simplyblock", managed("cp.example.com")),
    )
    .await;
    assert!(
        refusal(not_a_url)[0].starts_with("spec.source.managed.endpoint: Invalid value"),
        "a bare host name is refused"
    );
    for routable in [
        "https://10.0.0.5:8443",
        "https://cp.example.com/",
        "https://[2001:db8::1]:5000",
        "https://cp1.example.com",
        "https://127.example.com",
    ] {
        create(&api, control_plane("simplyblock", managed(routable)))
            .await
            .unwrap_or_else(|e| panic!("{routable} is routable: {e:?}"));
        api.delete("simplyblock", &Default::default())
            .await
            .expect("deleted");
    }
}

#[tokio::test]
async fn a_managed_endpoint_is_https_unless_insecure_is_said() {
    let (client, ns) = crate::support::namespace("cel-cp-https").await;
    let api = dynamic::<ControlPlane>(&client, &ns);
    let plain = create(
        &api,
        control_plane("simplyblock", managed("http://cp.example.com:5000")),
    )
    .await;
    assert_eq!(
        refusal(plain),
        [
            "spec.source.managed: Invalid value: spec.source.managed.endpoint must be https://: every request carries the control plane's bearer token; set insecure: true only for a control plane without TLS on a trusted network"
        ]
    );
    let mut said = managed("http://cp.example.com:5000");
    said["managed"]["insecure"] = json!(true);
    create(&api, control_plane("simplyblock", said))
        .await
        .expect("plain HTTP, said so");
}

#[tokio::test]
async fn images_are_full_references() {
    // Which registries are allowed is the chart's admission policy (a value); the schema
    // takes a full reference from any registry, and nothing else.
    let (client, ns) = crate::support::namespace("cel-cp-image").await;
    let api = dynamic::<ControlPlane>(&client, &ns);
    let partial = create(
        &api,
        control_plane(
            "simplyblock",
            json!({"local": {"image": "simplyblock:26.2.1"}}),
        ),
    )
    .await;
    let lines = refusal(partial);
    assert_eq!(lines.len(), 1);
    assert!(
        lines[0].starts_with("spec.source.local.image: Invalid value: \"simplyblock:26.2.1\": spec.source.local.image in body should match"),
        "{lines:?}"
    );
    create(
        &api,
        control_plane(
            "simplyblock",
            json!({"local": {"image": "registry.example.com/mirror/simplyblock:26.2.1"}}),
        ),
    )
    .await
    .expect("a mirror's image");

    let drivers = dynamic::<SimplyblockDriver>(&client, &ns);
    let sidecar = create(
        &drivers,
        json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver",
            "metadata": {"name": "simplyblock"},
            "spec": {"sidecarImages": {"provisioner": "docker.io/someone/csi-provisioner"}}
        }),
    )
    .await;
    assert!(
        refusal(sidecar)[0].starts_with("spec.sidecarImages.provisioner: Invalid value"),
        "a sidecar without a tag or digest is refused"
    );
}

#[tokio::test]
async fn a_driver_is_defaulted_and_keeps_its_name() {
    let (client, ns) = crate::support::namespace("cel-sbd").await;
    let api = dynamic::<SimplyblockDriver>(&client, &ns);
    let created = create(
        &api,
        json!({
            "apiVersion": "storage.simplyblock.io/v1alpha2", "kind": "SimplyblockDriver",
            "metadata": {"name": "simplyblock"}, "spec": {}
        }),
    )
    .await
    .expect("an empty spec is complete");
    let spec = &created.data["spec"];
    assert_eq!(spec["driverName"], "csi.simplyblock.io");
    assert_eq!(spec["controllerReplicas"], 1);
    assert_eq!(spec["imagePullPolicy"], "Always");
    assert_eq!(spec["enableVolumeSnapshots"], true);
    assert_eq!(spec["tls"]["enableTLS"], false);
    assert!(
        spec["sidecarImages"]["nodeDriverRegistrar"]
            .as_str()
            .is_some_and(
                |i| i.starts_with("registry.k8s.io/sig-storage/csi-node-driver-registrar:")
            ),
        "{spec}"
    );
    let rename = update(&api, "simplyblock", |d| {
        d["spec"]["driverName"] = json!("other.csi.example.com")
    })
    .await;
    assert_eq!(
        refusal(rename),
        [
            "spec.driverName: Invalid value: \"other.csi.example.com\": spec.driverName is immutable: every volume records the driver that provisioned it"
        ]
    );
}

fn cpops(name: &str, action: &str, extra: Value) -> Value {
    let mut spec = json!({"controlPlaneRef": "simplyblock", "action": action});
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    json!({
        "apiVersion": "storage.simplyblock.io/v1alpha2",
        "kind": "ControlPlaneOps",
        "metadata": {"name": name},
        "spec": spec
    })
}

#[tokio::test]
async fn a_control_plane_operation_is_frozen_but_for_abort() {
    let (client, ns) = crate::support::namespace("cel-cpops").await;
    let api = dynamic::<ControlPlaneOps>(&client, &ns);

    let bare_upgrade = create(&api, cpops("up", "Upgrade", json!({}))).await;
    assert_eq!(
        refusal(bare_upgrade),
        [
            "spec: Invalid value: action Upgrade needs spec.upgrade.image, the management API image to move to"
        ]
    );
    let bare_backup = create(&api, cpops("bk", "Backup", json!({}))).await;
    assert_eq!(
        refusal(bare_backup),
        [
            "spec: Invalid value: action Backup needs spec.backup.blobStore, where the backup is written"
        ]
    );

    create(
        &api,
        cpops(
            "up",
            "Upgrade",
            json!({"upgrade": {"image": "quay.io/simplyblock-io/simplyblock:26.2.2"}}),
        ),
    )
    .await
    .expect("an upgrade");
    let retarget = update(&api, "up", |o| {
        o["spec"]["upgrade"]["image"] = json!("quay.io/simplyblock-io/simplyblock:26.2.3")
    })
    .await;
    assert_eq!(
        refusal(retarget),
        ["spec: Invalid value: spec.upgrade is immutable"]
    );
    let add_restart = update(&api, "up", |o| {
        o["spec"]["restart"] = json!({"components": ["simplyblock-webappapi"]})
    })
    .await;
    assert_eq!(
        refusal(add_restart),
        ["spec: Invalid value: spec.restart is immutable"]
    );
    update(&api, "up", |o| o["spec"]["abort"] = json!(true))
        .await
        .expect("abort may change");
}
