//! The one error type of the simulator crate.

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error(
        "the state directory {dir} cannot be used ({reason}); check that it exists, is writable and is not held by another sbsim"
    )]
    StateDir { dir: String, reason: String },
    #[error(
        "the state database failed ({0}); the last change was not saved, so the request was answered with an error"
    )]
    Db(String),
    #[error("a record could not be encoded ({0}); this is a simulator bug")]
    Encode(String),
    #[error(
        "record {key} of table {table} is unreadable ({reason}); the state directory was written by an incompatible sbsim, so start with a fresh one"
    )]
    Corrupt {
        table: String,
        key: String,
        reason: String,
    },
    #[error(
        "the fleet file {path} is unusable ({reason}); fix it (see the sbsim README for the format)"
    )]
    Fleet { path: String, reason: String },
    #[error(
        "worker {worker}'s hardware profile {profile} cannot be used ({reason}); fix the profile name or --hosts-dir, or leave `profile` out to serve the synthetic `devices` block"
    )]
    HostTree {
        worker: String,
        profile: String,
        reason: String,
    },
    #[error(
        "the fault spec is invalid at {rule:?}: {reason}; see the sbsim README for the grammar"
    )]
    Faults { rule: String, reason: String },
    #[error("cannot listen on {addr} ({reason}); pick a free address")]
    Listen { addr: String, reason: String },
    #[error("the TLS material is unusable ({0}); check the certificate and key files")]
    Tls(String),
    #[error(
        "the kubeconfig cannot be used to watch Nodes ({0}); check the file or run without --kubeconfig and set labels through /_sim/workers"
    )]
    Kube(String),
}

impl SimError {
    pub fn db(e: impl std::fmt::Display) -> Self {
        SimError::Db(e.to_string())
    }

    pub fn encode(e: impl std::fmt::Display) -> Self {
        SimError::Encode(e.to_string())
    }
}
