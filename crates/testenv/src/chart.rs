//! The operator's Helm chart as the tests and the demo use it: rendered by the helm the
//! test cache holds ([`crate::assets::helm`]), its objects parsed, and applied to an API
//! server with server-side apply.

use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::{Discovery, Scope};

use crate::Error;

/// The chart's directory in the repository.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/charts/simplyblock-operator")
}

/// The CustomResourceDefinitions the chart installs (its `crds/`), as Helm reads them.
pub fn crds() -> Result<Vec<CustomResourceDefinition>, String> {
    let dir = dir().join("crds");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("reading {}: {e}", file.display()))?;
        let crd = serde_saphyr::from_str(&text)
            .map_err(|e| format!("{} is not a CustomResourceDefinition: {e}", file.display()))?;
        crds.push(crd);
    }
    Ok(crds)
}

/// Runs helm with `args`; its stdout, or its stderr as the error.
fn helm(args: &[&str]) -> Result<String, String> {
    let helm = crate::assets::helm().map_err(|e| e.to_string())?;
    let out = Command::new(helm)
        .args(args)
        .output()
        .map_err(|e| format!("running helm: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// `--set` arguments for `values`.
fn sets(values: &[(&str, &str)]) -> Vec<String> {
    values
        .iter()
        .flat_map(|(k, v)| ["--set".to_string(), format!("{k}={v}")])
        .collect()
}

/// `helm package` of the chart into `destination`: the archive a user installs from
/// (`simplyblock-operator-<version>.tgz`); helm's refusal as the error.
pub fn package(destination: &std::path::Path) -> Result<PathBuf, String> {
    let out = helm(&[
        "package",
        &dir().display().to_string(),
        "--destination",
        &destination.display().to_string(),
    ])?;
    // "Successfully packaged chart and saved it to: <path>"
    out.trim()
        .rsplit_once(": ")
        .map(|(_, path)| PathBuf::from(path.trim()))
        .ok_or_else(|| format!("helm package said: {out}"))
}

/// The printer column [`next_release`] adds to the storagepools CRD.
pub const NEXT_RELEASE_COLUMN: &str = "NextRelease";

/// The chart copied to `destination` as its next release, as one that changes a schema
/// ships: the patch version one up, and the storagepools CRD with the printer column
/// [`NEXT_RELEASE_COLUMN`]. Its name.
pub fn next_release(destination: &std::path::Path) -> Result<&'static str, String> {
    let copied = Command::new("cp")
        .arg("-r")
        .arg(dir())
        .arg(destination)
        .status()
        .map_err(|e| format!("running cp: {e}"))?;
    if !copied.success() {
        return Err(format!("copying the chart to {}", destination.display()));
    }
    let edit = |file: &str, change: &dyn Fn(&str) -> Option<String>| {
        let path = destination.join(file);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("reading {file}: {e}"))?;
        let changed = change(&text).ok_or_else(|| format!("{file} is not as expected"))?;
        std::fs::write(&path, changed).map_err(|e| format!("writing {file}: {e}"))
    };
    edit("Chart.yaml", &|text| {
        let line = text.lines().find(|l| l.starts_with("version: "))?;
        let (head, patch) = line.rsplit_once('.')?;
        let next = format!("{head}.{}", patch.parse::<u64>().ok()? + 1);
        Some(text.replacen(line, &next, 1))
    })?;
    edit("crds/storagepools.yaml", &|text| {
        let cluster = "    - jsonPath: .spec.clusterRef\n      name: Cluster\n";
        text.contains(cluster).then(|| {
            text.replacen(
                cluster,
                &format!(
                    "    - jsonPath: .spec.clusterRef\n      name: {NEXT_RELEASE_COLUMN}\n      type: string\n{cluster}"
                ),
                1,
            )
        })
    })?;
    Ok(NEXT_RELEASE_COLUMN)
}

/// `helm lint` of the chart with `values`; helm's complaint as the error.
pub fn lint(values: &[(&str, &str)]) -> Result<String, String> {
    let dir = dir();
    let mut args = vec!["lint".to_string(), dir.display().to_string()];
    args.extend(sets(values));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `helm install` of the chart as release `simplyblock-operator` in `namespace` (which
/// must exist) of the cluster `kubeconfig` names, with `values`; helm's refusal as the
/// error.
pub fn install(
    kubeconfig: &std::path::Path,
    namespace: &str,
    values: &[(&str, &str)],
) -> Result<String, String> {
    let mut args = vec![
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "install".to_string(),
        "simplyblock-operator".to_string(),
        dir().display().to_string(),
        "--namespace".to_string(),
        namespace.to_string(),
    ];
    args.extend(sets(values));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `helm upgrade` of release `simplyblock-operator` in `namespace` to the chart at `chart`
/// (this one, or a copy a test changed), keeping the values it was installed with
/// (`--reuse-values`) besides `values`; helm's refusal as the error.
pub fn upgrade(
    kubeconfig: &std::path::Path,
    namespace: &str,
    chart: &std::path::Path,
    values: &[(&str, &str)],
) -> Result<String, String> {
    let mut args = vec![
        "--kubeconfig".to_string(),
        kubeconfig.display().to_string(),
        "upgrade".to_string(),
        "simplyblock-operator".to_string(),
        chart.display().to_string(),
        "--namespace".to_string(),
        namespace.to_string(),
        "--reuse-values".to_string(),
    ];
    args.extend(sets(values));
    helm(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `helm uninstall` of release `simplyblock-operator` in `namespace`, waiting for what it
/// deletes to be gone; helm's refusal as the error.
pub fn uninstall(kubeconfig: &std::path::Path, namespace: &str) -> Result<String, String> {
    helm(&[
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "uninstall",
        "simplyblock-operator",
        "--namespace",
        namespace,
        "--wait",
        "--timeout",
        "5m",
    ])
}

/// The chart rendered as release `simplyblock-operator` in `namespace` with `values`
/// (`--set` pairs): what `helm install` leaves installed, its hooks (Jobs helm runs at
/// install, upgrade or uninstall, then removes) left out; helm's refusal as the error.
pub fn render(namespace: &str, values: &[(&str, &str)]) -> Result<Vec<DynamicObject>, String> {
    Ok(render_all(namespace, values)?
        .into_iter()
        .filter(|o| hook(o).is_none())
        .collect())
}

/// The chart's hooks rendered as [`render`] renders the rest: each with its
/// `helm.sh/hook` (when helm runs it).
pub fn hooks(
    namespace: &str,
    values: &[(&str, &str)],
) -> Result<Vec<(String, DynamicObject)>, String> {
    Ok(render_all(namespace, values)?
        .into_iter()
        .filter_map(|o| hook(&o).map(|h| (h, o)))
        .collect())
}

fn hook(object: &DynamicObject) -> Option<String> {
    object
        .metadata
        .annotations
        .as_ref()?
        .get("helm.sh/hook")
        .cloned()
}

fn render_all(namespace: &str, values: &[(&str, &str)]) -> Result<Vec<DynamicObject>, String> {
    let dir = dir();
    let mut args = vec![
        "template".to_string(),
        "simplyblock-operator".to_string(),
        dir.display().to_string(),
        "--namespace".to_string(),
        namespace.to_string(),
    ];
    args.extend(sets(values));
    let text = helm(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    let mut objects = Vec::new();
    for document in text.split("\n---") {
        let has_content = document
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if !has_content {
            continue;
        }
        let object: DynamicObject = serde_saphyr::from_str(document)
            .map_err(|e| format!("a rendered document does not parse: {e}\n{document}"))?;
        objects.push(object);
    }
    Ok(objects)
}

/// `Kind/name` of an object.
pub fn kind_and_name(object: &DynamicObject) -> String {
    format!(
        "{}/{}",
        object.types.as_ref().map_or("", |t| t.kind.as_str()),
        object.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Applies `objects` with server-side apply under `manager` (only a dry run when
/// `dry_run`), each in the namespace it names; every refusal is listed in the error.
pub async fn apply(
    client: &kube::Client,
    objects: &[DynamicObject],
    manager: &str,
    dry_run: bool,
) -> Result<(), Error> {
    // Only the groups applied, as Helm's mapper resolves each kind: a group that does not
    // answer (an aggregated API whose server is not up yet) must not stop the others.
    let mut groups: Vec<&str> = objects
        .iter()
        .filter_map(|o| o.types.as_ref())
        .map(|t| t.api_version.split_once('/').map_or("", |(g, _)| g))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let discovery = Discovery::new(client.clone())
        .filter(&groups)
        .run()
        .await
        .map_err(|e| Error::Client(format!("API discovery: {e}")))?;
    let mut params = PatchParams::apply(manager).force();
    params.dry_run = dry_run;
    let mut refusals = Vec::new();
    for object in objects {
        let Some(types) = &object.types else {
            refusals.push(format!("{}: no apiVersion/kind", kind_and_name(object)));
            continue;
        };
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", types.api_version.as_str()));
        let gvk = kube::core::GroupVersionKind::gvk(group, version, &types.kind);
        let Some((resource, capabilities)) = discovery.resolve_gvk(&gvk) else {
            refusals.push(format!(
                "{}: {} is not served",
                kind_and_name(object),
                types.api_version
            ));
            continue;
        };
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Namespaced => Api::namespaced_with(
                client.clone(),
                object.metadata.namespace.as_deref().unwrap_or("default"),
                &resource,
            ),
            Scope::Cluster => Api::all_with(client.clone(), &resource),
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(object)).await {
            refusals.push(format!("{}: {e}", kind_and_name(object)));
        }
    }
    if refusals.is_empty() {
        Ok(())
    } else {
        Err(Error::Apply(format!(
            "the API server refused {} object(s):\n{}",
            refusals.len(),
            refusals.join("\n")
        )))
    }
}

/// The ServiceAccount the operator runs as.
pub const OPERATOR_ACCOUNT: &str = "simplyblock-operator";

/// Installs the chart's accounts and roles for a release in `namespace` (which must
/// exist) and returns a client that is the operator's ServiceAccount: a test that runs the
/// operator with it holds exactly the permissions the chart grants.
pub async fn operator_client(env: &crate::TestEnv, namespace: &str) -> Result<kube::Client, Error> {
    install_identity(env, namespace).await?;
    env.service_account_client(namespace, OPERATOR_ACCOUNT)
        .await
}

/// Applies the chart's ServiceAccounts, roles and the policy bounding the operator's own
/// writes for a release in `namespace`, serving that namespace alone, with the chart's
/// webhook configuration standing empty for the operator to fill ([`webhook_placeholder`]).
pub async fn install_identity(env: &crate::TestEnv, namespace: &str) -> Result<(), Error> {
    install_identity_with(env, namespace, &[]).await
}

/// [`install_identity`] with chart values `values` (`--set` pairs) besides profile `empty`:
/// `operator.watchAllNamespaces=true` for an API server whose tests each take a namespace
/// of their own.
pub async fn install_identity_with(
    env: &crate::TestEnv,
    namespace: &str,
    values: &[(&str, &str)],
) -> Result<(), Error> {
    let mut all = vec![("deployment.profile", "empty")];
    all.extend_from_slice(values);
    let identity: Vec<DynamicObject> = render(namespace, &all)
        .map_err(Error::Apply)?
        .into_iter()
        .filter(|o| {
            let kind = o.types.as_ref().map_or("", |t| t.kind.as_str());
            let name = o.metadata.name.as_deref().unwrap_or_default();
            matches!(
                kind,
                "ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
            ) || (matches!(
                kind,
                "ValidatingAdmissionPolicy" | "ValidatingAdmissionPolicyBinding"
            ) && name == OPERATOR_WRITES_POLICY)
        })
        .collect();
    let admin = env.client().await?;
    apply(&admin, &identity, "simplyblock-testenv", false).await?;
    webhook_placeholder(&admin).await
}

/// The policy of the chart that bounds what the operator's account may change of the
/// objects it may update.
pub const OPERATOR_WRITES_POLICY: &str = "simplyblock-operator-writes";

/// The chart's ValidatingWebhookConfiguration, by name.
pub const WEBHOOK_CONFIGURATION: &str = "simplyblock-operator";

/// The chart's webhook configuration with no webhooks yet, unless one is there: the chart's
/// names the operator's Service, which an API server without a cluster network cannot
/// reach, so an operator run in place of its pod fills it with its webhooks at its own
/// address. It may update that configuration only, as in a real install; it may create none.
pub async fn webhook_placeholder(admin: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(admin.clone());
    let placeholder = ValidatingWebhookConfiguration {
        metadata: kube::api::ObjectMeta {
            name: Some(WEBHOOK_CONFIGURATION.into()),
            ..Default::default()
        },
        webhooks: None,
    };
    match api.create(&Default::default(), &placeholder).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(Error::Client(format!(
            "the webhook configuration's placeholder: {e}"
        ))),
    }
}

/// Makes way for webhooks served at a URL: this API server reaches no Service, so an operator
/// run in place of its pod registers its webhooks at its own address. Waits until the
/// chart's ValidatingWebhookConfiguration (naming the Service) is installed, then puts the
/// placeholder ([`webhook_placeholder`]) in its place; one naming no Service (the
/// operator's, or the placeholder) is left alone.
pub async fn serve_webhooks_here(client: &kube::Client) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let name = WEBHOOK_CONFIGURATION;
    let names_service = |c: &ValidatingWebhookConfiguration| {
        c.webhooks
            .iter()
            .flatten()
            .any(|w| w.client_config.service.is_some())
    };
    // Polled by hand: a pod stand-in runs this in a spawned task, which must be Send.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        match api.get_opt(name).await {
            Ok(Some(c)) if !names_service(&c) => return,
            Ok(Some(_))
                if api.delete(name, &Default::default()).await.is_ok()
                    && webhook_placeholder(client).await.is_ok() =>
            {
                return;
            }
            _ => {}
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the chart's webhook configuration was not installed within 120 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
