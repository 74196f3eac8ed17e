//! What the driver counts of the gRPC calls it answers, written to a
//! [`simplyblock_telemetry::metrics::Metrics`] registry that `/metrics` renders
//! ([`crate::metrics_http`]).
//!
//! One tower layer ([`MeasureLayer`]) wraps every service the socket serves (Identity,
//! Controller, Node, GroupController and the csi-addons services), so no method counts
//! itself. The layer knows a call only by its path and its answer; what the call found
//! out on the way is noted in a task-local [`CallNote`] that the services fill where
//! they learn it: the cluster a call's volume or class names ([`note_cluster`], from
//! [`crate::clusters::Clusters::client`]) and how far a stage or publish got
//! ([`note_step`]). Outside a call (the recovery loops) the notes go nowhere.
//!
//! | metric | labels | written when |
//! |---|---|---|
//! | `simplyblock_csi_operations_total` | `method, cluster, code` | every call |
//! | `simplyblock_csi_operation_duration_seconds` | `method, cluster` | every call |
//! | `simplyblock_csi_attach_errors_total` | `cluster, reason` (the gRPC code) | a stage failed connecting or attaching |
//! | `simplyblock_csi_mount_errors_total` | `reason` (the [`Step`]) | a stage or publish failed |
//! | `simplyblock_csi_volumes_staged_count` | | at each scrape, from the stage records |

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use simplyblock_telemetry::metrics::{Labels, Metrics};
use tonic::Code;
use tonic::codegen::http;
use uuid::Uuid;

pub const OPERATIONS: &str = "simplyblock_csi_operations_total";
pub const OPERATION_DURATION: &str = "simplyblock_csi_operation_duration_seconds";
pub const ATTACH_ERRORS: &str = "simplyblock_csi_attach_errors_total";
pub const MOUNT_ERRORS: &str = "simplyblock_csi_mount_errors_total";
pub const VOLUMES_STAGED: &str = "simplyblock_csi_volumes_staged_count";

const NODE_STAGE: &str = "/csi.v1.Node/NodeStageVolume";
const NODE_PUBLISH: &str = "/csi.v1.Node/NodePublishVolume";

/// How far a NodeStageVolume or NodePublishVolume got: the reason a failure is counted
/// under in `simplyblock_csi_mount_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Checking the request and what the node already holds (no step noted yet).
    Request,
    /// Asking the control plane for the volume's paths.
    Connect,
    /// Attaching the volume's device (NVMe/TCP connect, loop device).
    Attach,
    /// Probing and formatting the device.
    Format,
    /// Mounting the staged filesystem.
    Mount,
    /// Bind-mounting into the pod's target path.
    Publish,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Request => "request",
            Step::Connect => "connect",
            Step::Attach => "attach",
            Step::Format => "format",
            Step::Mount => "mount",
            Step::Publish => "publish",
        }
    }
}

/// Which clusters a call reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Reach {
    #[default]
    None,
    /// The first cluster the call named (a failed-over volume reaches its chain's other
    /// members after it).
    One(Uuid),
    /// A call over every cluster (a listing, the capacity of all): it names none.
    Every,
}

/// What a call learnt on the way, for the layer to label its samples with.
#[derive(Debug, Default)]
pub struct CallNote {
    reach: Mutex<Reach>,
    step: Mutex<Option<Step>>,
}

impl CallNote {
    fn cluster(&self) -> String {
        match *lock(&self.reach) {
            Reach::One(id) => id.to_string(),
            Reach::None | Reach::Every => String::new(),
        }
    }

    fn step(&self) -> Step {
        lock(&self.step).unwrap_or(Step::Request)
    }
}

tokio::task_local! {
    static CALL: Arc<CallNote>;
}

/// The call being served names `cluster` (its volume's, its class's); the first one named
/// labels the call.
pub fn note_cluster(cluster: Uuid) {
    let _ = CALL.try_with(|n| {
        let mut reach = lock(&n.reach);
        if *reach == Reach::None {
            *reach = Reach::One(cluster);
        }
    });
}

/// The call being served goes over every cluster: it is labelled with none.
pub fn note_every_cluster() {
    let _ = CALL.try_with(|n| *lock(&n.reach) = Reach::Every);
}

/// The stage or publish being served has got to `step`.
pub fn note_step(step: Step) {
    let _ = CALL.try_with(|n| *lock(&n.step) = Some(step));
}

/// A poisoned note only means a handler panicked; what it holds is still whole.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The name gRPC gives a status code, as the Kubernetes sidecars label theirs.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// The code of a unary answer: a failure is answered with `grpc-status` in its headers
/// (trailers only); an answer without it carries a message, and its trailers say OK.
fn answer_code(headers: &http::HeaderMap) -> Code {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32)
}

/// One answered call, as it is counted: pure, so what a call is counted as is tested
/// without serving it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub method: String,
    pub cluster: String,
    pub code: Code,
    pub step: Step,
    pub took: Duration,
}

impl Outcome {
    /// The samples this call adds: (counter, labels) for each counter it counts in.
    pub fn counted(&self) -> Vec<(&'static str, Labels)> {
        let mut out = vec![(
            OPERATIONS,
            vec![
                ("method", self.method.clone()),
                ("cluster", self.cluster.clone()),
                ("code", code_name(self.code).to_owned()),
            ],
        )];
        let failed = self.code != Code::Ok;
        if failed && (self.method == NODE_STAGE || self.method == NODE_PUBLISH) {
            out.push((MOUNT_ERRORS, vec![("reason", self.step.name().to_owned())]));
            if matches!(self.step, Step::Connect | Step::Attach) {
                out.push((
                    ATTACH_ERRORS,
                    vec![
                        ("cluster", self.cluster.clone()),
                        ("reason", code_name(self.code).to_owned()),
                    ],
                ));
            }
        }
        out
    }

    fn record(&self, metrics: &Metrics) {
        for (name, labels) in self.counted() {
            metrics.count(name, labels);
        }
        metrics.observe(
            OPERATION_DURATION,
            vec![
                ("method", self.method.clone()),
                ("cluster", self.cluster.clone()),
            ],
            self.took.as_secs_f64(),
        );
    }
}

/// Counts every call of the services it wraps into `metrics`.
#[derive(Debug, Clone)]
pub struct MeasureLayer {
    metrics: Arc<Metrics>,
}

impl MeasureLayer {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self { metrics }
    }
}

impl<S> tower::Layer<S> for MeasureLayer {
    type Service = Measured<S>;

    fn layer(&self, inner: S) -> Measured<S> {
        Measured {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// A service whose calls are counted ([`MeasureLayer`]).
#[derive(Debug, Clone)]
pub struct Measured<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for Measured<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let note = Arc::new(CallNote::default());
        let started = Instant::now();
        // The handler runs inside the answer's future, so the note is in scope there.
        let answer = CALL.sync_scope(note.clone(), || self.inner.call(request));
        let metrics = self.metrics.clone();
        Box::pin(async move {
            let result = CALL.scope(note.clone(), answer).await;
            let code = match &result {
                Ok(response) => answer_code(response.headers()),
                // The transport failed: no status was sent.
                Err(_) => Code::Unknown,
            };
            Outcome {
                method,
                cluster: note.cluster(),
                code,
                step: note.step(),
                took: started.elapsed(),
            }
            .record(&metrics);
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(method: &str, code: Code, step: Step) -> Outcome {
        Outcome {
            method: method.into(),
            cluster: "c1".into(),
            code,
            step,
            took: Duration::from_millis(3),
        }
    }

    fn names(o: &Outcome) -> Vec<&'static str> {
        o.counted().into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn a_failed_stage_counts_a_mount_error_by_step_and_an_attach_error_only_while_connecting() {
        let connect = outcome(NODE_STAGE, Code::FailedPrecondition, Step::Connect);
        assert_eq!(names(&connect), [OPERATIONS, MOUNT_ERRORS, ATTACH_ERRORS]);
        assert_eq!(
            connect.counted()[2].1,
            vec![
                ("cluster", "c1".to_owned()),
                ("reason", "FailedPrecondition".to_owned())
            ]
        );
        let mount = outcome(NODE_STAGE, Code::Internal, Step::Mount);
        assert_eq!(names(&mount), [OPERATIONS, MOUNT_ERRORS]);
        assert_eq!(mount.counted()[1].1, vec![("reason", "mount".to_owned())]);
        let publish = outcome(NODE_PUBLISH, Code::FailedPrecondition, Step::Request);
        assert_eq!(
            publish.counted()[1].1,
            vec![("reason", "request".to_owned())]
        );
    }

    #[test]
    fn a_success_or_another_method_counts_only_the_operation() {
        assert_eq!(
            names(&outcome(NODE_STAGE, Code::Ok, Step::Mount)),
            [OPERATIONS]
        );
        let create = outcome(
            "/csi.v1.Controller/CreateVolume",
            Code::NotFound,
            Step::Request,
        );
        assert_eq!(names(&create), [OPERATIONS]);
        assert_eq!(
            create.counted()[0].1,
            vec![
                ("method", "/csi.v1.Controller/CreateVolume".to_owned()),
                ("cluster", "c1".to_owned()),
                ("code", "NotFound".to_owned())
            ]
        );
    }

    #[test]
    fn the_answers_code_is_read_from_its_headers() {
        let mut h = http::HeaderMap::new();
        assert_eq!(answer_code(&h), Code::Ok);
        h.insert("grpc-status", http::HeaderValue::from_static("5"));
        assert_eq!(answer_code(&h), Code::NotFound);
        assert_eq!(code_name(Code::Cancelled), "Canceled");
    }

    #[tokio::test]
    async fn the_first_cluster_named_labels_a_call_and_one_over_every_cluster_has_none() {
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let note = Arc::new(CallNote::default());
        CALL.scope(note.clone(), async {
            note_cluster(a);
            note_cluster(b);
        })
        .await;
        assert_eq!(note.cluster(), a.to_string());
        let every = Arc::new(CallNote::default());
        CALL.scope(every.clone(), async {
            note_cluster(a);
            note_every_cluster();
            note_cluster(b);
        })
        .await;
        assert_eq!(every.cluster(), "");
        // Outside a call nothing is noted, and nothing fails.
        note_cluster(a);
        note_step(Step::Mount);
    }
}
