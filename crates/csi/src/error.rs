//! The one error type of the driver, and its mapping onto gRPC status codes.

use tonic::{Code, Status};

/// What went wrong serving a CSI call.
#[derive(Debug, thiserror::Error)]
pub enum CsiError {
    /// The request is missing a field or carries one the driver cannot use.
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    /// The named object does not exist.
    #[error("{0} does not exist")]
    NotFound(String),
    /// An object of that name exists with other properties.
    #[error("{0}")]
    AlreadyExists(String),
    /// The device or volume is in a state that refuses the call; the text says which.
    #[error("{0}")]
    FailedPrecondition(String),
    /// The requested size does not fit the limits.
    #[error("{0}")]
    OutOfRange(String),
    /// No cluster or pool can take the volume.
    #[error("{0}")]
    ResourceExhausted(String),
    /// Another operation on the same object is still under way; a retry will succeed.
    #[error("{0}")]
    Aborted(String),
    /// A pagination token the driver did not hand out.
    #[error("starting token {0:?} is not one this driver issued; restart the listing without it")]
    BadToken(String),
    /// The call is not served by this driver or in this mode.
    #[error("{0} is not supported by the simplyblock CSI driver")]
    Unimplemented(String),
    /// The cluster is not named in the CSI secret.
    #[error(
        "cluster {0} is not in the CSI secret ({name}, key {key}); add it there or check the volume handle",
        name = simplyblock_api::csi_secret::NAME,
        key = simplyblock_api::csi_secret::KEY
    )]
    UnknownCluster(String),
    /// The control plane refused or could not be reached.
    #[error(transparent)]
    ControlPlane(#[from] simplyblock_controlplane::Error),
    /// A host command (mount, mkfs, losetup, blkid) failed.
    #[error("`{command}` failed: {detail}")]
    Command { command: String, detail: String },
    /// A local file operation failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// Anything the driver did not expect; the text names it.
    #[error("{0}")]
    Internal(String),
}

/// A handle that is not simplyblock's names nothing the driver knows.
impl From<simplyblock_api::volume_handle::MalformedHandle> for CsiError {
    fn from(e: simplyblock_api::volume_handle::MalformedHandle) -> Self {
        CsiError::NotFound(e.0)
    }
}

impl CsiError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CsiError::Io {
            what: what.into(),
            source,
        }
    }

    /// The gRPC code a sidecar branches on.
    pub fn code(&self) -> Code {
        use simplyblock_controlplane::Error as Cp;
        match self {
            CsiError::InvalidArgument(_) => Code::InvalidArgument,
            CsiError::NotFound(_) => Code::NotFound,
            CsiError::AlreadyExists(_) => Code::AlreadyExists,
            CsiError::FailedPrecondition(_) => Code::FailedPrecondition,
            CsiError::OutOfRange(_) => Code::OutOfRange,
            CsiError::ResourceExhausted(_) => Code::ResourceExhausted,
            CsiError::BadToken(_) | CsiError::Aborted(_) => Code::Aborted,
            CsiError::Unimplemented(_) => Code::Unimplemented,
            CsiError::UnknownCluster(_) => Code::Unavailable,
            CsiError::ControlPlane(e) => match e {
                Cp::NotFound { .. } => Code::NotFound,
                Cp::Conflict { .. } => Code::Aborted,
                Cp::Refused { status: 412, .. } => Code::FailedPrecondition,
                Cp::Refused { status: 400, .. } | Cp::Invalid { .. } => Code::InvalidArgument,
                // Opaque refusals and outages are worth a retry by the sidecar.
                // A certificate that does not verify now may once the mounted CA is
                // replaced: the sidecar retries it like an outage.
                Cp::Refused { .. } | Cp::Unavailable { .. } | Cp::Untrusted { .. } => {
                    Code::Unavailable
                }
                Cp::Unauthorized { .. } => Code::Unauthenticated,
                Cp::Protocol { .. } | Cp::Config(_) => Code::Internal,
            },
            CsiError::Command { .. } | CsiError::Io { .. } | CsiError::Internal(_) => {
                Code::Internal
            }
        }
    }
}

impl From<CsiError> for Status {
    fn from(e: CsiError) -> Self {
        // Every failed call passes here once, inside the call's span (see `server::serve`).
        tracing::warn!(code = ?e.code(), "{e}");
        Status::new(e.code(), e.to_string())
    }
}

/// Result alias of this crate.
pub type Result<T, E = CsiError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn cp_refused(status: u16, opaque: bool) -> CsiError {
        CsiError::ControlPlane(simplyblock_controlplane::Error::Refused {
            method: "POST".into(),
            path: "/x".into(),
            status,
            message: "m".into(),
            opaque,
        })
    }

    #[test]
    fn control_plane_errors_map_to_the_codes_sidecars_expect() {
        assert_eq!(cp_refused(412, false).code(), Code::FailedPrecondition);
        assert_eq!(cp_refused(400, false).code(), Code::InvalidArgument);
        assert_eq!(cp_refused(500, true).code(), Code::Unavailable);
        let nf = CsiError::ControlPlane(simplyblock_controlplane::Error::NotFound {
            method: "GET".into(),
            path: "/v".into(),
            message: "gone".into(),
        });
        assert_eq!(nf.code(), Code::NotFound);
        assert_eq!(
            CsiError::UnknownCluster("c".into()).code(),
            Code::Unavailable
        );
        assert_eq!(CsiError::BadToken("x".into()).code(), Code::Aborted);
    }

    #[test]
    fn status_carries_the_text() {
        let s: Status = CsiError::FailedPrecondition("device carries xfs".into()).into();
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "device carries xfs");
    }
}
