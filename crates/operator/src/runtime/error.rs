//! The one error a reconcile returns, and the error of the operator's own servers.

use kube::runtime::finalizer::Error as FinalizerError;

/// What a reconcile can fail with. Domain outcomes (a refused call, a bad spec) are not
/// errors: they are written to status and events, and the pass ends `Ok`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("control plane: {0}")]
    ControlPlane(#[from] simplyblock_controlplane::Error),
    /// A write conditional on the resourceVersion was refused: the object changed since
    /// it was read, and the newer version is on its way through the watch.
    #[error("{0} changed since it was read; deciding again on the newer version")]
    Stale(String),
    /// A lock kept changing under a release.
    #[error("the lock on {0} kept changing under the release; retrying")]
    LockContended(String),
    /// Deletion waits for something (said in status and an event). Raised by a cleanup so
    /// the finalizer stays; [`finalized`] turns it into a requeue.
    #[error("deletion held: {0}")]
    Held(String),
    /// Issuing or reading a certificate failed.
    #[error("{0}")]
    Certificate(String),
    /// An object holds a value the operator refuses to act on (what, why, what to do).
    #[error("{0}")]
    Invalid(String),
    /// The CSI secret does not parse and was left untouched (said in an event).
    #[error("{0}")]
    CsiSecretUnreadable(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<FinalizerError<Error>>),
}

impl From<simplyblock_certs::Error> for Error {
    fn from(e: simplyblock_certs::Error) -> Error {
        Error::Certificate(format!("issuing a certificate failed: {e}"))
    }
}

impl Error {
    /// The error's kind, as the `kind` label of `simplyblock_reconcile_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self.inner() {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(_) => "kubernetes",
            Error::ControlPlane(_) => "control_plane",
            Error::Stale(_) => "stale",
            Error::LockContended(_) => "lock_contended",
            Error::Held(_) => "held",
            Error::Certificate(_) => "certificate",
            Error::Invalid(_) => "invalid",
            Error::CsiSecretUnreadable(_) => "csi_secret_unreadable",
            Error::Finalizer(_) => "finalizer",
        }
    }

    /// The error a finalizer wraps, or this one.
    pub(super) fn inner(&self) -> &Error {
        match self {
            Error::Finalizer(f) => match f.as_ref() {
                FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e.inner(),
                _ => self,
            },
            e => e,
        }
    }

    /// Lost a race to a newer version of the object: not a failure.
    pub fn is_stale(&self) -> bool {
        matches!(self.inner(), Error::Stale(_))
            || matches!(self.inner(), Error::Kube(kube::Error::Api(s)) if s.code == 409)
    }
}

/// `result`, with a write refused because the object moved since it was read
/// ([`Error::Stale`]) as `None`: the caller decides again on the newer copy.
pub fn unless_stale<T>(result: Result<T, Error>) -> Result<Option<T>, Error> {
    match result {
        Ok(written) => Ok(Some(written)),
        Err(Error::Stale(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What can go wrong in the operator's own machinery (controllers report their domain
/// errors in status and events instead).
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("TLS setup of the webhook server failed: {0}")]
    Tls(String),
    #[error("the {server} could not listen on {addr}: {source}")]
    Listen {
        /// Which server: the webhook server, the metrics server.
        server: &'static str,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("reading {what} from the Kubernetes API failed: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
}
