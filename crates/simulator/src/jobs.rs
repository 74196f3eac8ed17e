//! Probe Jobs on simulated workers. No kubelet runs on a simulated worker, so sbsim does
//! what the probe Job's pod would: it probes the worker's host tree (its fleet profile
//! under the hosts directory), writes the report ConfigMap the Job would write, and marks
//! the Job complete, or failed when the worker has no tree to read.

use std::path::PathBuf;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::json;
use simplyblock_discovery::configmap;
use simplyblock_discovery::probe::{ProbeOptions, RootFs, probe_with};

use crate::sim::Sim;

/// Watches probe Jobs in every namespace until the stream ends.
pub async fn watch(sim: Arc<Sim>, client: Client) {
    let api: Api<Job> = Api::all(client.clone());
    let selector = format!("{}={}", configmap::LABEL_COMPONENT, configmap::COMPONENT);
    let stream = watcher::watcher(api, watcher::Config::default().labels(&selector));
    let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(stream));
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(Event::Apply(job)) | Ok(Event::InitApply(job)) => {
                if finished(&job) {
                    continue;
                }
                if let Err(e) = run(&sim, &client, &job).await {
                    tracing::warn!(job = %job.name_any(), error = %e, "running a probe Job failed");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "Job watch failed; retrying"),
        }
    }
}

fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

async fn run(sim: &Sim, client: &Client, job: &Job) -> Result<(), kube::Error> {
    let ns = job.namespace().unwrap_or_default();
    let worker = job
        .annotations()
        .get(configmap::NODE_ANNOTATION)
        .cloned()
        .or_else(|| job.spec.as_ref()?.template.spec.as_ref()?.node_name.clone())
        .unwrap_or_default();
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let fail = |reason: &str, message: String| {
        json!({"status": {"failed": 1, "conditions": [{
            "type": "Failed", "status": "True", "reason": reason, "message": message,
        }]}})
    };
    // The probe's own arguments say where its report goes and which run owns it; a Job
    // that lacks one fails as the probe would.
    let args = probe_args(job);
    let (Some(run), Some(uid), Some(name)) = (
        arg(&args, "--run"),
        arg(&args, "--run-uid"),
        arg(&args, "--config-map"),
    ) else {
        let status = fail(
            "BadArguments",
            format!("the probe Job's arguments lack --run, --run-uid or --config-map: {args:?}"),
        );
        jobs.patch_status(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
        return Ok(());
    };
    let Some(root) = host_tree(sim, &worker) else {
        let status = fail(
            "NoHostTree",
            format!("simulated worker {worker} has no host tree to probe"),
        );
        jobs.patch_status(
            &job.name_any(),
            &PatchParams::default(),
            &Patch::Merge(status),
        )
        .await?;
        return Ok(());
    };
    let text = probe(&root, &worker);
    let cm = configmap::report_config_map(
        &ns,
        name,
        configmap::RunRef { name: run, uid },
        &worker,
        text,
    );
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .patch(
            &cm.name_any(),
            &PatchParams::apply("sbsim").force(),
            &Patch::Apply(&cm),
        )
        .await?;
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {"succeeded": 1, "startTime": now, "completionTime": now, "conditions": [
        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now},
        {"type": "Complete", "status": "True", "lastTransitionTime": now},
    ]}});
    jobs.patch_status(
        &job.name_any(),
        &PatchParams::default(),
        &Patch::Merge(status),
    )
    .await?;
    Ok(())
}

/// The arguments of the Job's probe container.
fn probe_args(job: &Job) -> Vec<String> {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// The value of `--flag value` or `--flag=value`.
fn arg<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).map(String::as_str)
        } else {
            a.strip_prefix(flag)?.strip_prefix('=')
        }
    })
}

/// The report the probe would write on `worker`, from its host tree. Synchronous, so
/// nothing the probe borrows is held across an await.
fn probe(root: &std::path::Path, worker: &str) -> String {
    let options = ProbeOptions {
        node: Some(worker.to_string()),
        ..ProbeOptions::default()
    };
    let report = probe_with(&RootFs::new(root), &options);
    simplyblock_discovery::report::encode(&report).unwrap_or_default()
}

/// The host tree of the fleet worker named `worker`, when it has one.
fn host_tree(sim: &Sim, worker: &str) -> Option<PathBuf> {
    let profile = sim.read(|t, _| t.workers.get(worker).and_then(|w| w.profile.clone()))?;
    crate::fleet::host_root(sim.config.hosts_dir.as_deref()?, &profile)
}
