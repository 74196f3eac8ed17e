//! What the kubelets of the storage-node DaemonSets' pods do with the pods' `tls` volume,
//! for an API server without kubelets (see [`storage_node_pods`]).
//!
//! A DaemonSet whose `tls` volume is a Secret has its pods mount that Secret: the same files
//! on every worker, handed over once for the whole namespace. A DaemonSet whose `tls`
//! volume is projected with a `podCertificate` source has a certificate of each pod's own:
//! the stand-in keeps a Pod object on every Node the DaemonSet selects (as the DaemonSet
//! controller would) and, as that Node's kubelet, makes a key and a PodCertificateRequest
//! for the pod, waits until the signer issues it, and hands over the key, the issued chain
//! and the volume's Secret files for that worker alone.
//!
//! Not done: refreshing a certificate at its `beginRefreshAt` (the tests and the demo run
//! for minutes, the certificates live for days), and key types ring cannot generate (RSA).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::certificates::v1::{PodCertificateRequest, PodCertificateRequestSpec};
use k8s_openapi::api::core::v1::{
    Container, Node, Pod, PodCertificateProjection, PodSpec, Secret, SecretProjection,
    ServiceAccount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::{ByteString, Resource as _};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};

use super::{Files, INTERVAL, StandIn};

/// Label on each Pod the stand-in keeps: the DaemonSet whose pod it stands in for.
pub const DAEMONSET_LABEL: &str = "standin.simplyblock.io/daemonset";
/// The volume of a storage-node pod its certificate, key and CAs are mounted from.
const VOLUME: &str = "tls";
/// The name of the one container of a stand-in Pod.
const CONTAINER: &str = "storage-node";
/// How long after a request was denied or failed the next is made.
const RETRY: Duration = Duration::from_secs(1);

/// Does for the storage-node DaemonSets of `namespace` what the kubelets of their pods
/// would with the pods' `tls` volume, handing each mount's files to `serve(namespace,
/// worker, files)`: `worker` is `None` for a Secret every pod mounts alike (handed over
/// again after each change), and the worker for a pod with a certificate of its own
/// (handed over once issued, and again when the volume's Secret files change). Nodes come
/// and go, and are enrolled and released: each pass looks again. Requests that are denied
/// or fail are reported (on stderr) and made again. Until dropped.
pub fn storage_node_pods(
    kube: kube::Client,
    namespace: String,
    serve: impl Fn(&str, Option<&str>, &Files) + Send + Sync + 'static,
) -> StandIn {
    let task = tokio::spawn(async move {
        let mut kubelets = Kubelets {
            client: kube,
            namespace,
            mounted: BTreeMap::new(),
            workers: BTreeMap::new(),
            said: BTreeMap::new(),
        };
        loop {
            // A failed look (the API server restarting, a list refused) is tried again on
            // the next pass; what was learnt stays.
            let looked = kubelets.pass(&serve).await;
            kubelets.report("its pass".into(), looked);
            tokio::time::sleep(INTERVAL).await;
        }
    });
    StandIn { task }
}

/// What a DaemonSet's pods mount as their `tls` volume.
enum Tls {
    /// The Secret of this name, the same for every pod.
    Secret(String),
    /// A certificate of each pod's own, and the Secret files projected beside it.
    PodCertificate(Box<PodCertificates>),
}

/// A DaemonSet whose pods each get a certificate of their own.
struct PodCertificates {
    daemonset: String,
    uid: String,
    node_selector: BTreeMap<String, String>,
    account: String,
    image: Option<String>,
    projection: PodCertificateProjection,
    secrets: Vec<SecretProjection>,
}

/// The `tls` volume of `ds`'s pod template, if it is one the stand-in knows.
fn tls(ds: &DaemonSet) -> Option<Tls> {
    let pod = ds.spec.template.spec.as_ref()?;
    let volume = pod.volumes.as_ref()?.iter().find(|v| v.name == VOLUME)?;
    if let Some(secret) = &volume.secret {
        return secret.secret_name.clone().map(Tls::Secret);
    }
    let sources = volume.projected.as_ref()?.sources.as_ref()?;
    let projection = sources.iter().find_map(|s| s.pod_certificate.clone())?;
    Some(Tls::PodCertificate(Box::new(PodCertificates {
        daemonset: ds.name_any(),
        uid: ds.uid().unwrap_or_default(),
        node_selector: pod.node_selector.clone().unwrap_or_default(),
        account: pod.service_account_name.clone().unwrap_or_default(),
        image: pod.containers.first().and_then(|c| c.image.clone()),
        projection,
        secrets: sources.iter().filter_map(|s| s.secret.clone()).collect(),
    })))
}

/// The Pod standing in for `daemonset`'s pod on `node`.
fn pod_name(daemonset: &str, node: &str) -> String {
    format!("{daemonset}-{node}")
}

/// What the kubelet of one worker keeps about the storage-node pod there.
#[derive(Default)]
struct Kubelet {
    /// The pod it acts for: a new pod (a new uid) starts over.
    pod_uid: String,
    credential: Credential,
    /// The files last handed over.
    served: Option<Files>,
}

/// Where a pod's certificate stands with its kubelet.
#[derive(Default)]
enum Credential {
    /// Nothing asked for yet, or the request gone before it was answered: ask.
    #[default]
    Missing,
    /// The last request denied or failed: ask again once `retry_at` has passed.
    Refused { retry_at: Instant },
    /// Asked for by the request of this name, with this key (PEM, PKCS#8).
    Requested { request: String, key_pem: String },
    /// Issued: the key and the chain the signer issued for it.
    Issued { key_pem: String, chain: String },
}

struct Kubelets {
    client: kube::Client,
    namespace: String,
    /// Each Secret mounted by every pod alike: the resourceVersion handed over.
    mounted: BTreeMap<String, String>,
    /// The kubelet of each (DaemonSet, worker) with a pod of its own certificate.
    workers: BTreeMap<(String, String), Kubelet>,
    /// What is going wrong, by what it goes wrong with: reported when it starts or
    /// changes, not on every pass.
    said: BTreeMap<String, String>,
}

impl Kubelets {
    async fn pass(
        &mut self,
        serve: &(impl Fn(&str, Option<&str>, &Files) + Send + Sync),
    ) -> Result<(), String> {
        let ns = self.namespace.clone();
        let sets = Api::<DaemonSet>::namespaced(self.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing the DaemonSets: {e}"))?;
        let mut own = Vec::new();
        for ds in &sets {
            match tls(ds) {
                Some(Tls::Secret(name)) => {
                    let mounted = self.mount_shared(&name, serve).await;
                    self.report(format!("mounting Secret {ns}/{name}"), mounted);
                }
                Some(Tls::PodCertificate(p)) => own.push(p),
                None => {}
            }
        }
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let kept = pods
            .list(&ListParams::default().labels(DAEMONSET_LABEL))
            .await
            .map_err(|e| format!("listing the stand-in pods: {e}"))?
            .items;
        let nodes = if own.is_empty() {
            Vec::new()
        } else {
            Api::<Node>::all(self.client.clone())
                .list(&ListParams::default())
                .await
                .map_err(|e| format!("listing the Nodes: {e}"))?
                .items
        };
        let mut wanted = BTreeSet::new();
        for set in &own {
            // The Secret files are the same for every pod of the set: read once a pass.
            let secret_files = self.secret_files(&set.secrets).await;
            for node in &nodes {
                let labels = node.labels();
                if !set
                    .node_selector
                    .iter()
                    .all(|(k, v)| labels.get(k) == Some(v))
                {
                    continue;
                }
                let worker = node.name_any();
                wanted.insert((set.daemonset.clone(), worker.clone()));
                let what = format!("the pod of DaemonSet {ns}/{} on {worker}", set.daemonset);
                let name = pod_name(&set.daemonset, &worker);
                let Some(pod) = kept.iter().find(|p| p.name_any() == name) else {
                    let created = self.create_pod(set, &worker).await;
                    self.report(what, created);
                    continue;
                };
                if pod.metadata.deletion_timestamp.is_some() {
                    // Its kubelet confirms a deletion at once; the pod comes back next pass.
                    self.delete_pod(&name).await;
                    continue;
                }
                // A new pod (another uid) starts over.
                let key = (set.daemonset.clone(), worker);
                let uid = pod.uid().unwrap_or_default();
                let mut kubelet = self
                    .workers
                    .remove(&key)
                    .filter(|k| k.pod_uid == uid)
                    .unwrap_or_else(|| Kubelet {
                        pod_uid: uid,
                        ..Kubelet::default()
                    });
                let stepped = self
                    .step(&mut kubelet, set, pod, node, secret_files.as_ref(), serve)
                    .await;
                self.workers.insert(key, kubelet);
                self.report(what, stepped);
            }
        }
        // A pod whose worker the set no longer selects, or whose set is gone or mounts a
        // Secret now, goes (as the DaemonSet controller would remove it).
        for pod in &kept {
            let set = pod
                .labels()
                .get(DAEMONSET_LABEL)
                .cloned()
                .unwrap_or_default();
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            if !wanted.contains(&(set, node)) {
                self.delete_pod(&pod.name_any()).await;
            }
        }
        self.workers.retain(|key, _| wanted.contains(key));
        Ok(())
    }

    /// Hands over Secret `name` for every pod of the namespace, when it has changed.
    async fn mount_shared(
        &mut self,
        name: &str,
        serve: &(impl Fn(&str, Option<&str>, &Files) + Send + Sync),
    ) -> Result<(), String> {
        let Some(secret) = Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(name)
            .await
            .map_err(|e| e.to_string())?
        else {
            // Not written yet: the pods wait for it, as they would for their volume.
            return Ok(());
        };
        let version = secret.metadata.resource_version.clone().unwrap_or_default();
        if self.mounted.get(name) == Some(&version) {
            return Ok(());
        }
        serve(&self.namespace, None, &data(secret));
        self.mounted.insert(name.to_owned(), version);
        Ok(())
    }

    /// The files the Secret sources of a projected volume give, by path; `None` while one
    /// of the Secrets or keys a pod cannot start without is missing.
    async fn secret_files(&self, sources: &[SecretProjection]) -> Option<Files> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut files = Files::new();
        for source in sources {
            let optional = source.optional == Some(true);
            let Some(secret) = api.get_opt(&source.name).await.ok()? else {
                if optional {
                    continue;
                }
                return None;
            };
            let mut data = data(secret);
            match &source.items {
                None => files.extend(data),
                Some(items) => {
                    for item in items {
                        match data.remove(&item.key) {
                            Some(value) => {
                                files.insert(item.path.clone(), value);
                            }
                            None if optional => {}
                            None => return None,
                        }
                    }
                }
            }
        }
        Some(files)
    }

    /// Creates the Pod standing in for `set`'s pod on `worker`. By the admin: this stands
    /// in for the DaemonSet controller. It carries none of the template's labels, so that
    /// the operator's own handling of storage-node pods (maintenance, restarts), tested
    /// with pods of its tests' own, leaves it alone.
    async fn create_pod(&self, set: &PodCertificates, worker: &str) -> Result<(), String> {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(pod_name(&set.daemonset, worker)),
                labels: Some(BTreeMap::from([(
                    DAEMONSET_LABEL.to_owned(),
                    set.daemonset.clone(),
                )])),
                owner_references: Some(vec![OwnerReference {
                    api_version: DaemonSet::API_VERSION.into(),
                    kind: DaemonSet::KIND.into(),
                    name: set.daemonset.clone(),
                    uid: set.uid.clone(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some(worker.to_owned()),
                service_account_name: Some(set.account.clone()),
                containers: vec![Container {
                    name: CONTAINER.into(),
                    image: set.image.clone(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        match Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .create(&PostParams::default(), &pod)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(format!("creating its stand-in Pod: {e}")),
        }
    }

    /// Deletes a stand-in Pod at once, as its kubelet confirms a deletion (there is none
    /// to); a failure is tried again next pass.
    async fn delete_pod(&self, name: &str) {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let _ = Api::<Pod>::namespaced(self.client.clone(), &self.namespace)
            .delete(name, &now)
            .await;
    }

    /// One step of `kubelet` for `pod` of `set` on `node`: a request made, a request's
    /// answer read, or the files handed over.
    async fn step(
        &self,
        kubelet: &mut Kubelet,
        set: &PodCertificates,
        pod: &Pod,
        node: &Node,
        secret_files: Option<&Files>,
        serve: &(impl Fn(&str, Option<&str>, &Files) + Send + Sync),
    ) -> Result<(), String> {
        let requests: Api<PodCertificateRequest> =
            Api::namespaced(self.client.clone(), &self.namespace);
        match std::mem::take(&mut kubelet.credential) {
            Credential::Refused { retry_at } if Instant::now() < retry_at => {
                kubelet.credential = Credential::Refused { retry_at };
            }
            Credential::Missing | Credential::Refused { .. } => {
                let (request, key_pem) = self.request(set, pod, node).await?;
                kubelet.credential = Credential::Requested { request, key_pem };
            }
            Credential::Requested { request, key_pem } => {
                let pcr = match requests.get_opt(&request).await {
                    Ok(Some(pcr)) => pcr,
                    // Removed before it was answered: ask again.
                    Ok(None) => return Ok(()),
                    Err(e) => {
                        let read = format!("reading PodCertificateRequest {request}: {e}");
                        kubelet.credential = Credential::Requested { request, key_pem };
                        return Err(read);
                    }
                };
                let status = pcr.status.unwrap_or_default();
                let answer = status
                    .conditions
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| matches!(c.type_.as_str(), "Issued" | "Denied" | "Failed"));
                kubelet.credential = match answer {
                    None => Credential::Requested { request, key_pem },
                    Some(c) if c.type_ == "Issued" => Credential::Issued {
                        key_pem,
                        chain: status.certificate_chain.unwrap_or_default(),
                    },
                    Some(c) => {
                        eprintln!(
                            "stand-in kubelet of {}: PodCertificateRequest {}/{request} for pod {} {}: {}: {}; asking again in {RETRY:?}",
                            node.name_any(),
                            self.namespace,
                            pod.name_any(),
                            c.type_.to_lowercase(),
                            c.reason,
                            c.message
                        );
                        Credential::Refused {
                            retry_at: Instant::now() + RETRY,
                        }
                    }
                };
            }
            issued @ Credential::Issued { .. } => kubelet.credential = issued,
        }
        let (Credential::Issued { key_pem, chain }, Some(secret_files)) =
            (&kubelet.credential, secret_files)
        else {
            return Ok(());
        };
        let mut files = secret_files.clone();
        let projection = &set.projection;
        if let Some(path) = &projection.key_path {
            files.insert(path.clone(), key_pem.clone().into_bytes());
        }
        if let Some(path) = &projection.certificate_chain_path {
            files.insert(path.clone(), chain.clone().into_bytes());
        }
        if let Some(path) = &projection.credential_bundle_path {
            files.insert(path.clone(), format!("{key_pem}{chain}").into_bytes());
        }
        if kubelet.served.as_ref() != Some(&files) {
            serve(&self.namespace, Some(&node.name_any()), &files);
            kubelet.served = Some(files);
        }
        Ok(())
    }

    /// Makes a key and a PodCertificateRequest for `pod` on `node` as its kubelet would;
    /// the request's name and the key (PEM, PKCS#8). By the admin: a real kubelet makes
    /// it as the Node, which the Node authorizer allows for the pods on it alone.
    async fn request(
        &self,
        set: &PodCertificates,
        pod: &Pod,
        node: &Node,
    ) -> Result<(String, String), String> {
        let projection = &set.projection;
        let algorithm = match projection.key_type.as_str() {
            "ECDSAP256" => &rcgen::PKCS_ECDSA_P256_SHA256,
            "ECDSAP384" => &rcgen::PKCS_ECDSA_P384_SHA384,
            "ED25519" => &rcgen::PKCS_ED25519,
            other => return Err(format!("key type {other} is not one the stand-in makes")),
        };
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let account_name = pod_spec.service_account_name.unwrap_or_default();
        let account = Api::<ServiceAccount>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&account_name)
            .await
            .map_err(|e| format!("reading ServiceAccount {account_name}: {e}"))?
            .ok_or_else(|| format!("its ServiceAccount {account_name} does not exist (yet)"))?;
        let key = rcgen::KeyPair::generate_for(algorithm)
            .map_err(|e| format!("generating a key: {e}"))?;
        // Empty, as a kubelet's is: the request's key and signature are all that count.
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        let csr = params
            .serialize_request(&key)
            .map_err(|e| format!("making the PKCS#10 request: {e}"))?;
        let pod_name = pod.name_any();
        let pod_uid = pod.uid().unwrap_or_default();
        let request = PodCertificateRequest {
            metadata: ObjectMeta {
                generate_name: Some(format!("{pod_name}-")),
                owner_references: Some(vec![OwnerReference {
                    api_version: Pod::API_VERSION.into(),
                    kind: Pod::KIND.into(),
                    name: pod_name.clone(),
                    uid: pod_uid.clone(),
                    ..OwnerReference::default()
                }]),
                ..ObjectMeta::default()
            },
            spec: PodCertificateRequestSpec {
                signer_name: projection.signer_name.clone(),
                max_expiration_seconds: projection.max_expiration_seconds,
                pod_name,
                pod_uid,
                service_account_name: account_name,
                service_account_uid: account.uid().unwrap_or_default(),
                node_name: node.name_any(),
                node_uid: node.uid().unwrap_or_default(),
                stub_pkc_s10_request: ByteString(csr.der().to_vec()),
                unverified_user_annotations: projection.user_annotations.clone(),
            },
            status: None,
        };
        let created =
            Api::<PodCertificateRequest>::namespaced(self.client.clone(), &self.namespace)
                .create(&PostParams::default(), &request)
                .await
                .map_err(|e| format!("creating its PodCertificateRequest: {e}"))?;
        Ok((created.name_any(), key.serialize_pem()))
    }

    /// Reports on stderr what goes wrong with `what`, once until it changes or is over.
    fn report(&mut self, what: String, result: Result<(), String>) {
        match result {
            Ok(()) => {
                self.said.remove(&what);
            }
            Err(e) => {
                if self.said.get(&what) != Some(&e) {
                    eprintln!("stand-in kubelet in {}: {what}: {e}", self.namespace);
                    self.said.insert(what, e);
                }
            }
        }
    }
}

/// A Secret's data as files.
fn data(secret: Secret) -> Files {
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect()
}
