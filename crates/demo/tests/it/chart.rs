//! The Helm chart: each profile lints and renders what it must and nothing it must not,
//! bad values are refused with a message, every value a template reads is defined, no
//! role holds a wildcard, a real API server accepts every rendered object, and the csi-addons
//! controller manager and its CRDs come only when asked for; the monitoring (`monitoring`)
//! renders only when asked for and holds to the metric catalogue.

mod monitoring;

use std::collections::BTreeSet;

use serde_json::Value;
use simplyblock_testenv::chart::{self, kind_and_name};
use simplyblock_testenv::{TestEnv, create_namespace};

const PROFILES: [&str; 3] = ["standalone", "managed", "empty"];

/// `--set` values that make `profile` render.
fn values(profile: &str) -> Vec<(&'static str, &str)> {
    let mut v = vec![("deployment.profile", profile)];
    if profile == "managed" {
        v.push((
            "controlplane.managed.endpoint",
            "https://cp.example.com:8443",
        ));
    }
    v
}

fn rendered(profile: &str) -> Vec<kube::api::DynamicObject> {
    chart::render("simplyblock-system", &values(profile))
        .unwrap_or_else(|e| panic!("profile {profile} does not render: {e}"))
}

fn names(profile: &str) -> BTreeSet<String> {
    rendered(profile).iter().map(kind_and_name).collect()
}

#[test]
fn every_profile_lints() {
    for profile in PROFILES {
        chart::lint(&values(profile)).unwrap_or_else(|e| panic!("helm lint ({profile}): {e}"));
    }
}

#[test]
fn each_profile_renders_the_operator_and_only_its_own_objects() {
    let operator = [
        "Deployment/simplyblock-operator",
        "ServiceAccount/simplyblock-operator",
        "ServiceAccount/simplyblock-nodeprobe",
        "ClusterRole/simplyblock-operator",
        "ClusterRoleBinding/simplyblock-operator",
        "Role/simplyblock-operator-leader-election",
        // The CSI driver's permissions, static, whether or not a driver is installed.
        "ClusterRole/simplyblock-operator-csi-node",
        "ClusterRoleBinding/simplyblock-operator-csi-node",
        "ClusterRoleBinding/simplyblock-operator-csi-addons",
        "Role/simplyblock-operator-csi-controller",
        "RoleBinding/simplyblock-operator-csi-controller",
        "Service/simplyblock-operator-webhook",
        "ValidatingWebhookConfiguration/simplyblock-operator",
        "ValidatingAdmissionPolicy/simplyblock-served-namespaces",
        "ValidatingAdmissionPolicyBinding/simplyblock-served-namespaces",
        "ValidatingAdmissionPolicy/simplyblock-nodeprobe-reports",
        "ValidatingAdmissionPolicyBinding/simplyblock-nodeprobe-reports",
    ];
    let installs = ["ControlPlane/simplyblock", "SimplyblockDriver/simplyblock"];
    for profile in PROFILES {
        let names = names(profile);
        for must in operator {
            assert!(names.contains(must), "{profile} lacks {must}: {names:?}");
        }
        for install in installs {
            assert_eq!(
                names.contains(install),
                profile != "empty",
                "{profile} and {install}: {names:?}"
            );
        }
    }

    // Serving every namespace, the operator refuses none.
    let mut all = values("empty");
    all.push(("operator.watchAllNamespaces", "true"));
    let everywhere: BTreeSet<String> = chart::render("simplyblock-system", &all)
        .expect("renders")
        .iter()
        .map(kind_and_name)
        .collect();
    assert!(
        !everywhere
            .iter()
            .any(|n| n.ends_with("/simplyblock-served-namespaces")),
        "{everywhere:?}"
    );

    let source = |profile: &str| {
        rendered(profile)
            .into_iter()
            .find(|o| kind_and_name(o) == "ControlPlane/simplyblock")
            .map(|o| o.data["spec"]["source"].clone())
            .expect("a ControlPlane")
    };
    let standalone = source("standalone");
    assert!(standalone["local"]["image"].is_string(), "{standalone}");
    assert!(standalone.get("managed").is_none());
    let managed = source("managed");
    assert_eq!(
        managed["managed"]["endpoint"],
        "https://cp.example.com:8443"
    );
    assert!(managed.get("local").is_none());

    // The operator runs as the chart says: two leader-elected, locked-down replicas.
    let deployment = rendered("empty")
        .into_iter()
        .find(|o| kind_and_name(o) == "Deployment/simplyblock-operator")
        .expect("operator Deployment");
    let spec = &deployment.data["spec"];
    assert_eq!(spec["replicas"], 2);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["image"],
        format!(
            "quay.io/simplyblock-io/simplyblock-operator:{}",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(container["livenessProbe"].is_object() && container["readinessProbe"].is_object());

    // The control plane's token is a projected one of its own: short-lived, never extended,
    // for the API server's audience unless told, and the file the operator reads.
    let token_source = |pod: &serde_json::Value| {
        pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "control-plane-token")
            .map(|v| v["projected"]["sources"][0]["serviceAccountToken"].clone())
            .expect("the control-plane token volume")
    };
    let token = token_source(pod);
    assert_eq!(token["expirationSeconds"], 3600, "{token}");
    assert!(token.get("audience").is_none(), "{token}");
    let mount = container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "control-plane-token")
        .expect("mounted");
    let file = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "SIMPLYBLOCK_CONTROL_PLANE_TOKEN_FILE")
        .expect("the token file named");
    assert_eq!(
        file["value"].as_str(),
        Some(
            format!(
                "{}/{}",
                mount["mountPath"].as_str().unwrap_or(""),
                token["path"].as_str().unwrap_or("")
            )
            .as_str()
        )
    );
    let mut audience = values("empty");
    audience.push((
        "operator.controlPlaneToken.audience",
        "simplyblock-management-api",
    ));
    let deployment = chart::render("simplyblock-system", &audience)
        .expect("renders")
        .into_iter()
        .find(|o| kind_and_name(o) == "Deployment/simplyblock-operator")
        .expect("operator Deployment");
    let token = token_source(&deployment.data["spec"]["template"]["spec"]);
    assert_eq!(token["audience"], "simplyblock-management-api", "{token}");
}

#[test]
fn bad_values_are_refused_with_what_to_do() {
    let refused = |values: &[(&str, &str)]| {
        chart::render("simplyblock-system", values).expect_err("the render must fail")
    };
    let bogus = refused(&[("deployment.profile", "bogus")]);
    assert!(
        bogus.contains("deployment.profile \"bogus\" is not a profile: choose standalone"),
        "{bogus}"
    );
    let missing = refused(&[("deployment.profile", "managed")]);
    assert!(
        missing.contains("deployment.profile managed needs controlplane.managed.endpoint"),
        "{missing}"
    );
    for endpoint in [
        "https://127.0.0.1:8443",
        "https://localhost",
        "http://169.254.169.254",
        "https://[::1]:443",
        "https://[fe80::1]",
    ] {
        let message = refused(&[
            ("deployment.profile", "managed"),
            ("controlplane.managed.endpoint", endpoint),
        ]);
        assert!(
            message.contains("is a loopback or link-local address"),
            "{endpoint}: {message}"
        );
    }
    // The bearer token is not sent in cleartext unless asked for.
    let plain = refused(&[
        ("deployment.profile", "managed"),
        (
            "controlplane.managed.endpoint",
            "http://cp.example.com:5000",
        ),
    ]);
    assert!(
        plain.contains(
            "is not https://, and every request carries the control plane's bearer token"
        ),
        "{plain}"
    );
    let asked = chart::render(
        "simplyblock-system",
        &[
            ("deployment.profile", "managed"),
            (
                "controlplane.managed.endpoint",
                "http://cp.example.com:5000",
            ),
            ("controlplane.managed.insecure", "true"),
        ],
    )
    .expect("plain HTTP, asked for");
    let managed = asked
        .iter()
        .find(|o| kind_and_name(o) == "ControlPlane/simplyblock")
        .expect("a ControlPlane");
    assert_eq!(managed.data["spec"]["source"]["managed"]["insecure"], true);
    let unknown = refused(&[("operator.replica", "3")]);
    assert!(
        unknown.contains("additional properties 'replica' not allowed"),
        "{unknown}"
    );
    // An image that is no full reference, and images from registries not listed: every one
    // named at once, with the values to set.
    let partial = refused(&[("controlplane.local.image", "simplyblock:26.2.1")]);
    assert!(partial.contains("/controlplane/local/image"), "{partial}");
    let foreign = refused(&[
        ("controlplane.local.image", "evil.example.com/api:1"),
        ("driver.sidecarImages.provisioner", "evil.example.com/p:1"),
    ]);
    for named in [
        "controlplane.local.image (evil.example.com/api:1)",
        "driver.sidecarImages.provisioner (evil.example.com/p:1)",
        "add their registry to allowedRegistries",
    ] {
        assert!(foreign.contains(named), "{named}: {foreign}");
    }
    // A mirror, listed, with every image there (the sidecars too: their default registry
    // is not listed).
    let mut mirrored = vec![
        ("allowedRegistries[0]", "mirror.example.com/sb"),
        ("imagePullSecrets[0].name", "mirror-pull"),
        (
            "image.repository",
            "mirror.example.com/sb/simplyblock-operator",
        ),
        (
            "driver.image.repository",
            "mirror.example.com/sb/simplyblock-csi",
        ),
        (
            "controlplane.local.image",
            "mirror.example.com/sb/simplyblock:26.2.1",
        ),
    ];
    let sidecars: Vec<(String, String)> = [
        "provisioner",
        "attacher",
        "resizer",
        "snapshotter",
        "healthMonitor",
        "nodeDriverRegistrar",
    ]
    .iter()
    .map(|s| {
        (
            format!("driver.sidecarImages.{s}"),
            format!("mirror.example.com/sb/{}:v1", s.to_lowercase()),
        )
    })
    .collect();
    let unmirrored = refused(&mirrored);
    assert!(
        unmirrored.contains("driver.sidecarImages.provisioner (registry.k8s.io/sig-storage/"),
        "{unmirrored}"
    );
    mirrored.extend(sidecars.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    chart::render("simplyblock-system", &mirrored).expect("every image from the listed mirror");
    // A token the API server would refuse to issue (under ten minutes).
    let short = refused(&[("operator.controlPlaneToken.expirationSeconds", "60")]);
    assert!(
        short.contains("/operator/controlPlaneToken/expirationSeconds"),
        "{short}"
    );
}

/// Every `.Values` path a template reads, directly or through a variable assigned from
/// one (`$x := .Values.a` then `$x.b`).
fn paths_read(template: &str) -> BTreeSet<String> {
    fn path_at(text: &str) -> String {
        text.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '.')
            .collect::<String>()
            .trim_end_matches('.')
            .to_string()
    }
    let mut variables = std::collections::BTreeMap::new();
    for (i, _) in template.match_indices(":= .Values.") {
        let before = &template[..i];
        let name = before
            .trim_end()
            .rsplit('$')
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        variables.insert(name, path_at(&template[i + ":= .Values.".len()..]));
    }
    let mut paths = BTreeSet::new();
    for (i, _) in template.match_indices(".Values.") {
        paths.insert(path_at(&template[i + ".Values.".len()..]));
    }
    for (name, base) in &variables {
        let needle = format!("${name}.");
        for (i, _) in template.match_indices(&needle) {
            let rest = path_at(&template[i + needle.len()..]);
            if !rest.is_empty() {
                paths.insert(format!("{base}.{rest}"));
            }
        }
    }
    paths.retain(|p| !p.is_empty());
    paths
}

#[test]
fn every_value_a_template_reads_is_defined() {
    let dir = chart::dir();
    let values: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(dir.join("values.yaml")).expect("values.yaml"),
    )
    .expect("values.yaml parses");
    let mut undefined = Vec::new();
    let mut read = 0;
    for entry in std::fs::read_dir(dir.join("templates")).expect("templates") {
        let path = entry.expect("entry").path();
        let text = std::fs::read_to_string(&path).expect("template");
        for p in paths_read(&text) {
            read += 1;
            let defined = p
                .split('.')
                .try_fold(&values, |v, key| v.get(key))
                .is_some();
            if !defined {
                undefined.push(format!(
                    "{}: .Values.{p}",
                    path.file_name().unwrap_or_default().to_string_lossy()
                ));
            }
        }
    }
    assert!(read > 20, "the scan found only {read} value reads");
    assert!(
        undefined.is_empty(),
        "templates read values that values.yaml does not define (they render empty): {undefined:#?}"
    );
}

#[test]
fn the_value_scan_sees_direct_and_variable_reads() {
    let paths = paths_read(
        "{{ .Values.a.b }} {{- $x := .Values.c }} {{ $x.d.e }} {{ with .Values.f }}{{ end }}",
    );
    assert_eq!(
        paths.into_iter().collect::<Vec<_>>(),
        ["a.b", "c", "c.d.e", "f"]
    );
}

#[test]
fn no_role_holds_a_wildcard() {
    let mut rules = 0;
    for profile in PROFILES {
        // The hooks' roles too, the uninstall's that deletes everything among them.
        let mut everything = values(profile);
        everything.extend([
            ("uninstall.deleteData", "true"),
            ("uninstall.confirmDeleteData", "true"),
        ]);
        let hooks = chart::hooks("simplyblock-system", &everything)
            .expect("render")
            .into_iter()
            .map(|(_, o)| o);
        // The csi-addons manager's roles too.
        let manager = render_pairs(&with_csi_addons(profile, &[])).expect("render");
        for object in rendered(profile).into_iter().chain(hooks).chain(manager) {
            let kind = object
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            if kind != "ClusterRole" && kind != "Role" {
                continue;
            }
            for rule in object.data["rules"].as_array().into_iter().flatten() {
                rules += 1;
                for field in ["verbs", "resources", "apiGroups", "nonResourceURLs"] {
                    for value in rule[field].as_array().into_iter().flatten() {
                        assert!(
                            value.as_str().is_some_and(|v| !v.contains('*')),
                            "{} grants {field} {value} in {rule}",
                            kind_and_name(&object)
                        );
                    }
                }
            }
        }
    }
    assert!(rules > 10, "only {rules} rules were read");
}

#[tokio::test]
async fn a_real_api_server_accepts_every_rendered_object() {
    let env = TestEnv::shared().expect("test environment");
    // The chart's own CRDs, as `helm install` would create them.
    let crds = chart::crds().expect("the chart's CRDs");
    assert_eq!(crds.len(), simplyblock_api::crds().len());
    env.install_crds(&crds).await.expect("CRDs");
    let client = env.client().await.expect("client");
    for profile in PROFILES {
        let ns = format!("chart-{profile}");
        create_namespace(&client, &ns).await.expect("namespace");
        let objects = chart::render(&ns, &values(profile)).expect("render");
        chart::apply(&client, &objects, "chart-test", true)
            .await
            .unwrap_or_else(|e| panic!("profile {profile}: {e}"));
    }
}

/// When helm runs the hook Job `job` of the chart rendered with `values`, and its args;
/// `None` when the chart renders no such hook.
fn hook_job(job: &str, values: &[(&str, &str)]) -> Option<(String, Vec<String>)> {
    let hooks = chart::hooks("simplyblock-system", values).expect("render");
    let (when, job) = hooks
        .into_iter()
        .find(|(_, o)| kind_and_name(o) == format!("Job/{job}"))?;
    let args = job.data["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .map(|a| a.as_str().unwrap_or_default().to_owned())
        .collect();
    Some((when, args))
}

/// The uninstall hook's args for `values`, checked to run before helm deletes anything.
fn uninstall_args(values: &[(&str, &str)]) -> Option<Vec<String>> {
    let (when, args) = hook_job("simplyblock-uninstall", values)?;
    assert_eq!(when, "pre-delete");
    Some(args)
}

fn control_plane_kept(values: &[(&str, &str)]) -> bool {
    chart::render("simplyblock-system", values)
        .expect("render")
        .iter()
        .find(|o| kind_and_name(o) == "ControlPlane/simplyblock")
        .expect("a ControlPlane")
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("helm.sh/resource-policy"))
        .is_some_and(|p| p == "keep")
}

#[test]
fn uninstall_releases_the_driver_and_keeps_the_data_unless_asked_twice() {
    // By default: the hook removes the driver in the served namespace; the control plane
    // is kept, the data with it.
    let standalone = values("standalone");
    assert_eq!(
        uninstall_args(&standalone).expect("a hook"),
        [
            "uninstall",
            "--namespace=simplyblock-system",
            "--timeout=270s"
        ]
    );
    assert!(control_plane_kept(&standalone));
    assert!(
        uninstall_args(&values("managed")).is_some(),
        "the managed profile installs a driver too"
    );
    assert_eq!(
        uninstall_args(&values("empty")),
        None,
        "the empty profile installs nothing the operator holds"
    );
    // Asked once: refused, saying what the pair means.
    for one in ["uninstall.deleteData", "uninstall.confirmDeleteData"] {
        let mut v = standalone.clone();
        v.push((one, "true"));
        let refused = chart::render("simplyblock-system", &v).expect_err("asked once");
        assert!(
            refused.contains("must be set together") && refused.contains("cannot be undone"),
            "{refused}"
        );
    }
    // Asked twice: everything goes, the control plane is no longer kept.
    let mut twice = standalone.clone();
    twice.extend([
        ("uninstall.deleteData", "true"),
        ("uninstall.confirmDeleteData", "true"),
    ]);
    assert_eq!(
        uninstall_args(&twice).expect("a hook"),
        [
            "uninstall",
            "--namespace=simplyblock-system",
            "--delete-data",
            "--timeout=270s"
        ]
    );
    assert!(!control_plane_kept(&twice));
}

#[test]
fn preflight_runs_before_install_and_upgrade_with_the_profiles_checks() {
    let args = |values: &[(&str, &str)]| hook_job("simplyblock-preflight", values);
    let (when, standalone) = args(&values("standalone")).expect("a preflight hook");
    assert_eq!(when, "pre-install,pre-upgrade");
    assert_eq!(
        standalone,
        [
            "preflight",
            "--profile=standalone",
            "--tls-provider=cert-manager",
            "--registry=quay.io/simplyblock-io",
            "--registry=docker.io/simplyblock",
            "--registry=public.ecr.aws/simply-block",
            "--registry=registry.k8s.io/sig-storage",
            "--registry=quay.io/csiaddons",
        ]
    );
    // "*" names no registry to dial; a mirror's port and path are passed as listed.
    let mut mirror = values("standalone");
    mirror.push(("allowedRegistries[0]", "*"));
    mirror.push(("allowedRegistries[1]", "registry.example.com:5000/sb"));
    mirror.push(("allowedRegistries[2]", "registry.k8s.io/sig-storage"));
    assert_eq!(
        args(&mirror).expect("a hook").1[3..],
        [
            "--registry=registry.example.com:5000/sb",
            "--registry=registry.k8s.io/sig-storage",
        ]
    );
    let mut plain = values("standalone");
    plain.push(("controlplane.local.tls.enableTLS", "false"));
    assert_eq!(args(&plain).expect("a hook").1[2], "--tls-provider=none");
    assert_eq!(
        args(&values("managed")).expect("a hook").1[1],
        "--profile=managed"
    );
    let mut off = values("standalone");
    off.push(("preflight.enabled", "false"));
    assert_eq!(args(&off), None);
}

#[test]
fn the_packaged_chart_is_the_chart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = chart::package(dir.path()).expect("helm package");
    let chart_yaml: Value = serde_saphyr::from_str(
        &std::fs::read_to_string(chart::dir().join("Chart.yaml")).expect("Chart.yaml"),
    )
    .expect("Chart.yaml parses");
    let version = chart_yaml["version"].as_str().expect("a version");
    assert_eq!(
        archive.file_name().and_then(|n| n.to_str()),
        Some(format!("simplyblock-operator-{version}.tgz").as_str())
    );
    // The archive holds the templates, the CRDs, the schema and the README.
    let listing = std::process::Command::new("tar")
        .args(["-tzf", &archive.display().to_string()])
        .output()
        .expect("tar");
    let listing = String::from_utf8_lossy(&listing.stdout);
    for file in [
        "simplyblock-operator/values.schema.json",
        "simplyblock-operator/README.md",
        "simplyblock-operator/crds/storageclusters.yaml",
        "simplyblock-operator/templates/crds-upgrade.yaml",
        "simplyblock-operator/templates/uninstall.yaml",
    ] {
        assert!(listing.lines().any(|l| l == file), "{file} in {listing}");
    }
}

#[test]
fn the_crds_are_applied_before_every_upgrade_unless_something_else_manages_them() {
    assert_eq!(
        hook_job("simplyblock-crds", &values("empty")),
        Some((
            "pre-upgrade".to_owned(),
            vec![
                "apply-crds".to_owned(),
                "--directory=/crds".to_owned(),
                "--namespace=simplyblock-system".to_owned(),
            ]
        ))
    );
    let mut managed_elsewhere = values("empty");
    managed_elsewhere.push(("crds.upgrade", "false"));
    assert_eq!(hook_job("simplyblock-crds", &managed_elsewhere), None);
}

/// The chart rendered with the csi-addons controller manager on (profile `profile`), and
/// any further `values`.
fn with_csi_addons(
    profile: &str,
    more: &[(&'static str, &'static str)],
) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = values(profile)
        .into_iter()
        .map(|(k, v)| (k, v.to_owned()))
        .collect();
    v.push(("csiAddons.controllerManager.enabled", "true".to_owned()));
    v.extend(more.iter().map(|(k, v)| (*k, (*v).to_owned())));
    v
}

fn render_pairs(values: &[(&str, String)]) -> Result<Vec<kube::api::DynamicObject>, String> {
    render_in("simplyblock-system", values)
}

fn render_in(
    namespace: &str,
    values: &[(&str, String)],
) -> Result<Vec<kube::api::DynamicObject>, String> {
    let pairs: Vec<(&str, &str)> = values.iter().map(|(k, v)| (*k, v.as_str())).collect();
    chart::render(namespace, &pairs)
}

/// The names of the csi-addons CRDs, from their types.
fn csi_addons_crd_names() -> BTreeSet<String> {
    simplyblock_api::csi_addons::crds()
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .map(|n| format!("CustomResourceDefinition/{n}"))
        .collect()
}

const MANAGER_OBJECTS: [&str; 6] = [
    "ServiceAccount/simplyblock-csi-addons-manager",
    "ClusterRole/simplyblock-csi-addons-manager",
    "ClusterRoleBinding/simplyblock-csi-addons-manager",
    "Role/simplyblock-csi-addons-manager",
    "RoleBinding/simplyblock-csi-addons-manager",
    "Deployment/simplyblock-csi-addons-manager",
];

#[test]
fn the_csi_addons_manager_and_its_crds_render_only_when_enabled() {
    let crds = csi_addons_crd_names();
    // Every kind the manager watches: the five replication kinds and the seven others.
    assert_eq!(crds.len(), 12, "{crds:?}");
    for kind in [
        "volumereplications.replication.storage.openshift.io",
        "volumereplicationclasses.replication.storage.openshift.io",
        "volumegroupreplications.replication.storage.openshift.io",
        "volumegroupreplicationclasses.replication.storage.openshift.io",
        "volumegroupreplicationcontents.replication.storage.openshift.io",
        "csiaddonsnodes.csiaddons.openshift.io",
    ] {
        assert!(
            crds.contains(&format!("CustomResourceDefinition/{kind}")),
            "{kind}: {crds:?}"
        );
    }
    for profile in PROFILES {
        // Off (the default): none of it.
        let off = names(profile);
        for object in MANAGER_OBJECTS
            .iter()
            .map(|s| s.to_string())
            .chain(crds.clone())
        {
            assert!(
                !off.contains(&object),
                "{profile} renders {object} while off"
            );
        }
        assert!(
            !off.iter().any(|n| n.contains("csi-addons-manager")),
            "{off:?}"
        );
        // On: all of it, and the CRDs kept when the release goes.
        let on = render_pairs(&with_csi_addons(profile, &[])).expect("renders with csi-addons");
        let on_names: BTreeSet<String> = on.iter().map(kind_and_name).collect();
        for object in MANAGER_OBJECTS
            .iter()
            .map(|s| s.to_string())
            .chain(crds.clone())
        {
            assert!(on_names.contains(&object), "{profile} lacks {object}");
        }
        for crd in on.iter().filter(|o| crds.contains(&kind_and_name(o))) {
            assert_eq!(
                crd.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("helm.sh/resource-policy"))
                    .map(String::as_str),
                Some("keep"),
                "{}",
                kind_and_name(crd)
            );
        }
    }

    // The template is what the generator writes from the types.
    let template = std::fs::read_to_string(chart::dir().join("templates/csi-addons-crds.yaml"))
        .expect("the template");
    assert_eq!(
        template,
        simplyblock_api::csi_addons::chart_template().expect("generated"),
        "templates/csi-addons-crds.yaml is stale: run `cargo run -p simplyblock-api --bin crds`"
    );

    // The manager runs locked down, for the release's namespace, from the chart's image.
    let on = render_pairs(&with_csi_addons("empty", &[])).expect("renders");
    let deployment = on
        .iter()
        .find(|o| kind_and_name(o) == "Deployment/simplyblock-csi-addons-manager")
        .expect("the manager");
    let pod = &deployment.data["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "simplyblock-csi-addons-manager");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "quay.io/csiaddons/k8s-controller:v0.15.0"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--namespace=simplyblock-system"), "{args:?}");
    assert!(args.contains(&"--leader-elect"), "{args:?}");

    // Least privilege: no Secret, no RBAC object, nothing of the storage kinds.
    for role in on.iter().filter(|o| {
        matches!(
            kind_and_name(o).as_str(),
            "ClusterRole/simplyblock-csi-addons-manager" | "Role/simplyblock-csi-addons-manager"
        )
    }) {
        let rules = role.data["rules"].as_array().expect("rules");
        assert!(!rules.is_empty());
        for rule in rules {
            for resource in rule["resources"].as_array().into_iter().flatten() {
                let resource = resource.as_str().unwrap_or_default();
                assert!(
                    ![
                        "secrets",
                        "roles",
                        "clusterroles",
                        "rolebindings",
                        "clusterrolebindings"
                    ]
                    .contains(&resource),
                    "{} grants {resource}",
                    kind_and_name(role)
                );
            }
            for group in rule["apiGroups"].as_array().into_iter().flatten() {
                assert_ne!(group, "storage.simplyblock.io", "{rule}");
            }
        }
    }

    // A platform team's own registry: the mirror's copy, and a foreign one refused with the
    // value to set.
    let mirrored = render_pairs(&with_csi_addons(
        "empty",
        &[
            ("allowedRegistries[0]", "mirror.example.com/sb"),
            (
                "image.repository",
                "mirror.example.com/sb/simplyblock-operator",
            ),
            (
                "csiAddons.controllerManager.image.repository",
                "mirror.example.com/sb/k8s-controller",
            ),
        ],
    ))
    .expect("every image from the mirror");
    let image = mirrored
        .iter()
        .find(|o| kind_and_name(o) == "Deployment/simplyblock-csi-addons-manager")
        .map(|d| d.data["spec"]["template"]["spec"]["containers"][0]["image"].clone())
        .expect("the manager");
    assert_eq!(image, "mirror.example.com/sb/k8s-controller:v0.15.0");
    let foreign = render_pairs(&with_csi_addons(
        "empty",
        &[
            ("allowedRegistries[0]", "mirror.example.com/sb"),
            (
                "image.repository",
                "mirror.example.com/sb/simplyblock-operator",
            ),
        ],
    ))
    .expect_err("the manager's default registry is not listed");
    assert!(
        foreign.contains("csiAddons.controllerManager.image.repository")
            && foreign.contains("quay.io/csiaddons/k8s-controller:v0.15.0"),
        "{foreign}"
    );
    let unknown = render_pairs(&with_csi_addons(
        "empty",
        &[("csiAddons.controllerManager.replicas", "2")],
    ))
    .expect_err("an unknown key");
    assert!(
        unknown.contains("additional properties 'replicas' not allowed"),
        "{unknown}"
    );
}

#[tokio::test]
async fn a_real_api_server_serves_the_csi_addons_crds_and_holds_their_rules() {
    use kube::api::{Api, DynamicObject, PostParams};
    use kube::discovery::ApiResource;
    use serde_json::json;

    let env = TestEnv::shared().expect("test environment");
    let ns = "chart-csi-addons";
    let rendered = render_in(ns, &with_csi_addons("empty", &[])).expect("renders");
    let crd_names = csi_addons_crd_names();
    let crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        rendered
            .iter()
            .filter(|o| crd_names.contains(&kind_and_name(o)))
            .map(|o| serde_json::from_value(serde_json::to_value(o).expect("json")).expect("a CRD"))
            .collect();
    assert_eq!(crds.len(), 12);
    // Created for real (structural schemas, CEL rules compiled) and Established.
    env.install_crds(&crds).await.expect("the csi-addons CRDs");
    let client = env.client().await.expect("client");
    create_namespace(&client, ns).await.expect("namespace");
    // The rest of what the value adds, as a dry run.
    let rest: Vec<DynamicObject> = rendered
        .into_iter()
        .filter(|o| {
            let n = kind_and_name(o);
            MANAGER_OBJECTS.contains(&n.as_str())
        })
        .collect();
    assert_eq!(rest.len(), MANAGER_OBJECTS.len());
    chart::apply(&client, &rest, "chart-test", true)
        .await
        .expect("the manager's objects");

    let api = |group: &str, kind: &str, plural: &str, namespaced: bool| {
        let resource = ApiResource {
            group: group.into(),
            version: "v1alpha1".into(),
            api_version: format!("{group}/v1alpha1"),
            kind: kind.into(),
            plural: plural.into(),
        };
        if namespaced {
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource)
        } else {
            Api::<DynamicObject>::all_with(client.clone(), &resource)
        }
    };
    let object = |value: serde_json::Value| -> DynamicObject {
        serde_json::from_value(value).expect("an object")
    };
    let replication = "replication.storage.openshift.io";

    // A class as Ramen finds it: the driver, its policy, its labels.
    let classes = api(
        replication,
        "VolumeReplicationClass",
        "volumereplicationclasses",
        false,
    );
    classes
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "replication.storage.openshift.io/v1alpha1",
                "kind": "VolumeReplicationClass",
                "metadata": {"name": "chart-csi-addons-vrc", "labels": {
                    "ramendr.openshift.io/storageid": "c1",
                    "ramendr.openshift.io/replicationid": "simplyblock-0123456789abcdef"}},
                "spec": {"provisioner": "csi.simplyblock.io",
                         "parameters": {"replicationPolicyID": "p1", "schedulingInterval": "5m"}}
            })),
        )
        .await
        .expect("a VolumeReplicationClass");
    let vrs = api(replication, "VolumeReplication", "volumereplications", true);
    let vr = |state: &str| {
        object(json!({
            "apiVersion": "replication.storage.openshift.io/v1alpha1",
            "kind": "VolumeReplication",
            "metadata": {"name": "data", "namespace": ns},
            "spec": {"volumeReplicationClass": "chart-csi-addons-vrc", "replicationState": state,
                     "dataSource": {"kind": "PersistentVolumeClaim", "name": "data"}}
        }))
    };
    let bogus = vrs
        .create(&PostParams::default(), &vr("promoted"))
        .await
        .expect_err("not a replication state");
    assert!(bogus.to_string().contains("replicationState"), "{bogus}");
    let created = vrs
        .create(&PostParams::default(), &vr("primary"))
        .await
        .expect("a VolumeReplication");
    assert_eq!(created.data["spec"]["autoResync"], false, "the default");
    // Secondary is a change of state; another class is refused.
    let mut demoted = created.clone();
    demoted.data["spec"]["replicationState"] = json!("secondary");
    let demoted = vrs
        .replace("data", &PostParams::default(), &demoted)
        .await
        .expect("demoted");
    let mut moved = demoted.clone();
    moved.data["spec"]["volumeReplicationClass"] = json!("another");
    let immutable = vrs
        .replace("data", &PostParams::default(), &moved)
        .await
        .expect_err("the class is fixed");
    assert!(
        immutable
            .to_string()
            .contains("volumeReplicationClass is immutable"),
        "{immutable}"
    );

    // A group, the claims it gathers chosen by label.
    let vgrs = api(
        replication,
        "VolumeGroupReplication",
        "volumegroupreplications",
        true,
    );
    vgrs.create(
        &PostParams::default(),
        &object(json!({
            "apiVersion": "replication.storage.openshift.io/v1alpha1",
            "kind": "VolumeGroupReplication",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {"volumeGroupReplicationClassName": "chart-csi-addons-vgrc",
                     "replicationState": "primary",
                     "source": {"selector": {"matchLabels": {
                         "ramendr.openshift.io/consistency-group": "app"}}}}
        })),
    )
    .await
    .expect("a VolumeGroupReplication");
    // A sidecar's announcement.
    let nodes = api(
        "csiaddons.openshift.io",
        "CSIAddonsNode",
        "csiaddonsnodes",
        true,
    );
    nodes
        .create(
            &PostParams::default(),
            &object(json!({
                "apiVersion": "csiaddons.openshift.io/v1alpha1",
                "kind": "CSIAddonsNode",
                "metadata": {"name": "controller-0", "namespace": ns},
                "spec": {"driver": {"name": "csi.simplyblock.io",
                                    "endpoint": "pod://controller-0.simplyblock:9070",
                                    "nodeID": "controller-0"}}
            })),
        )
        .await
        .expect("a CSIAddonsNode");
    classes
        .delete("chart-csi-addons-vrc", &Default::default())
        .await
        .expect("the class removed");
}
