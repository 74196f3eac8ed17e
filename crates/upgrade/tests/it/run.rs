//! A stage's run on a real API server where another writer changes an object between the
//! step's read and its write, as the operator does beside the tool: the refused write is
//! decided again on a fresh read, and the run goes on.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use simplyblock_testenv::TestEnv;
use simplyblock_upgrade::step::StepError;
use simplyblock_upgrade::{Context, Helm, Options, Stage, Step, Target, World};

const NS: &str = "upgrade-run";
const OBJECT: &str = "contended";

/// How many times the step's change was tried.
static TRIES: AtomicU32 = AtomicU32::new(0);

/// Reads the object, and (on the first try only) lets another writer change it before
/// writing from that read with its resourceVersion, as every step's write does.
fn contended<'a>(ctx: &'a Context, _: &'a World) -> BoxFuture<'a, Result<(), StepError>> {
    async move {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), NS);
        let read = api
            .get(OBJECT)
            .await
            .map_err(|e| StepError::kube("reading", e))?;
        if TRIES.fetch_add(1, Ordering::SeqCst) == 0 {
            api.patch(
                OBJECT,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"other": "written meanwhile"}})),
            )
            .await
            .map_err(|e| StepError::kube("the other writer", e))?;
        }
        let patch = json!({"metadata": {"resourceVersion": read.metadata.resource_version},
                           "data": {"step": "done"}});
        api.patch(OBJECT, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| StepError::kube(format!("updating ConfigMap/{OBJECT}"), e))?;
        Ok(())
    }
    .boxed()
}

#[tokio::test]
async fn a_step_whose_write_meets_a_newer_object_is_applied_again_on_a_fresh_read() {
    let env = TestEnv::shared().expect("API server");
    let client = env.client().await.expect("client");
    simplyblock_testenv::create_namespace(&client, NS)
        .await
        .expect("namespace");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let mut object = ConfigMap::default();
    object.metadata.name = Some(OBJECT.into());
    api.create(&PostParams::default(), &object)
        .await
        .expect("the object");

    let step = Step {
        id: "write-contended",
        stage: Stage::Upgrade,
        phase: "",
        requires: &[],
        describe: |_| Vec::new(),
        done: |_| false,
        validate: |_, _| Ok(()),
        apply: Some(contended),
        verify: None,
        recorded: true,
    };
    let ctx = Context {
        client: client.clone(),
        namespace: NS.into(),
        helm: Helm {
            binary: "helm".into(),
            chart: None,
            release: "simplyblock-operator".into(),
            values: Vec::new(),
            kubeconfig: None,
        },
        wait: Duration::from_secs(5),
    };
    let target = Target {
        release: "simplyblock-operator".into(),
        from_release: String::new(),
        old_operator: String::new(),
    };
    simplyblock_upgrade::run::run(&ctx, &[step], Stage::Upgrade, &target, &Options::default())
        .await
        .expect("the run goes on past the conflict");

    assert_eq!(
        TRIES.load(Ordering::SeqCst),
        2,
        "one refused write, one on a fresh read"
    );
    let data = api
        .get(OBJECT)
        .await
        .expect("object")
        .data
        .unwrap_or_default();
    assert_eq!(data.get("step").map(String::as_str), Some("done"));
    assert_eq!(
        data.get("other").map(String::as_str),
        Some("written meanwhile"),
        "the other writer's change stands"
    );
}
