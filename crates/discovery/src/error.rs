use thiserror::Error;

/// Everything discovery can refuse. Each text says what happened, what it means and what
/// to do about it.
#[derive(Debug, Error, PartialEq, Eq, Clone)]
pub enum Error {
    /// A report written by a probe of another version.
    #[error(
        "the probe report is version {found} and this operator reads version {expected}, so the probe has to be re-run: start a new discovery run (a new OperatorOps with action Discover)"
    )]
    ReportVersion { found: u64, expected: u64 },

    /// A report that names no node cannot be attributed to a worker.
    #[error(
        "the probe report names no node, so nothing in it can be attributed to a worker; re-run discovery"
    )]
    ReportNamesNoNode,

    /// The ConfigMap exists but its report key does not.
    #[error(
        "the ConfigMap {config_map} carries no report.json, so the probe did not finish writing it; re-run discovery for that worker"
    )]
    ReportMissing { config_map: String },

    /// The bytes are not a report at all.
    #[error(
        "the probe report cannot be parsed ({detail}); it was not written by a simplyblock probe or was cut short, so re-run discovery"
    )]
    ReportMalformed { detail: String },

    /// The report does not fit in a ConfigMap.
    #[error(
        "the probe report for node {node} is {size} bytes, more than the {limit} a ConfigMap entry may hold; the machine reports unusually many devices or interfaces, so report this as a bug with the probe's output"
    )]
    ReportTooLarge {
        node: String,
        size: usize,
        limit: usize,
    },

    /// Encoding failed, which only a bug can cause.
    #[error("the probe report for node {node} could not be encoded ({detail}); this is a bug")]
    ReportEncode { node: String, detail: String },

    /// An unparsable `driveSizeRange`.
    #[error(
        "spec.discover.deviceFilter.driveSizeRange {input:?} is not a size range: {detail}; write it as MIN-MAX (\"100G-2T\"), MIN- (\"500G-\"), -MAX (\"-2T\") or one exact size (\"1T\")"
    )]
    SizeRange { input: String, detail: String },

    /// The draft could not be rendered as YAML, which only a bug can cause.
    #[error("the draft could not be rendered as YAML ({detail}); this is a bug")]
    Render { detail: String },
}
