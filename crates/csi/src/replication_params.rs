//! The VolumeReplicationClass parameters the csi-addons sidecar passes to every
//! replication call, and the one place their refusals are worded.

use std::collections::HashMap;

use uuid::Uuid;

use crate::error::{CsiError, Result};

/// The backend replication policy Enable attaches; empty on the failover-target side.
pub const POLICY_ID: &str = "replicationPolicyID";
/// The cluster Resync names as the failback source, when the chain does not tell.
pub const SOURCE_CLUSTER_ID: &str = "sourceClusterID";
/// `async` (the default) or `sync`.
pub const METHOD: &str = "replication.storage.simplyblock.io/method";
/// The site a sync promote or demote acts for; required with the sync method.
pub const SITE: &str = "replication.storage.simplyblock.io/site";

/// How the class replicates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Async,
    Sync { site: String },
}

/// The parsed class parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationParams {
    /// `None` makes Enable a success without a call: this side is a failover target.
    pub policy: Option<Uuid>,
    pub source_cluster: Option<Uuid>,
    pub method: Method,
}

impl ReplicationParams {
    /// Parse the class parameters; a value the driver cannot use is INVALID_ARGUMENT.
    /// Keys the driver does not know (the sidecar's own, `schedulingInterval`) are ignored.
    pub fn parse(params: &HashMap<String, String>) -> Result<Self> {
        let policy = optional_uuid(params, POLICY_ID, "a replication policy")?;
        let source_cluster = optional_uuid(params, SOURCE_CLUSTER_ID, "a cluster")?;
        let method = match params.get(METHOD).map(|s| s.trim()) {
            None | Some("") | Some("async") => Method::Async,
            Some("sync") => {
                let site = params.get(SITE).map(|s| s.trim()).unwrap_or_default();
                if site.is_empty() {
                    return Err(CsiError::InvalidArgument(format!(
                        "the replication class sets {METHOD}=sync but no {SITE}; name the site \
                         this driver's clusters belong to"
                    )));
                }
                if !valid_site(site) {
                    return Err(CsiError::InvalidArgument(format!(
                        "{SITE}={site:?} is not a site name: it starts with a letter or digit \
                         and has at most 63 letters, digits, '.', '_' or '-'"
                    )));
                }
                Method::Sync {
                    site: site.to_string(),
                }
            }
            Some(other) => {
                return Err(CsiError::InvalidArgument(format!(
                    "{METHOD}={other:?} is not a replication method; use async or sync"
                )));
            }
        };
        Ok(Self {
            policy,
            source_cluster,
            method,
        })
    }
}

fn optional_uuid(params: &HashMap<String, String>, key: &str, what: &str) -> Result<Option<Uuid>> {
    match params.get(key).map(|s| s.trim()) {
        None | Some("") => Ok(None),
        Some(v) => Uuid::parse_str(v).map(Some).map_err(|_| {
            CsiError::InvalidArgument(format!(
                "the replication class's {key}={v:?} is not the UUID of {what}"
            ))
        }),
    }
}

/// `[A-Za-z0-9][A-Za-z0-9._-]{0,62}`.
fn valid_site(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.len() <= 63
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A sync route's failure as the sidecar must see it: a 409 (a gate refusal or a promote in
/// progress) and a 500 (an ANA failure) are worth a retry, so UNAVAILABLE; everything else
/// keeps the driver's ordinary mapping (412 FAILED_PRECONDITION, 400 INVALID_ARGUMENT).
pub fn sync_route_error(err: simplyblock_controlplane::Error) -> CsiError {
    use simplyblock_controlplane::Error as Cp;
    // A refusal worth a retry is UNAVAILABLE in the driver's mapping (500 already is).
    match err {
        Cp::Conflict {
            method,
            path,
            message,
        } => CsiError::ControlPlane(Cp::Refused {
            method,
            path,
            status: 409,
            message,
            opaque: true,
        }),
        other => CsiError::ControlPlane(other),
    }
}

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;

    fn params(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refusal(kv: &[(&str, &str)]) -> String {
        let err = ReplicationParams::parse(&params(kv)).expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{err}");
        err.to_string()
    }

    #[test]
    fn an_empty_class_is_async_without_a_policy() {
        let p = ReplicationParams::parse(&params(&[("schedulingInterval", "5m")])).expect("parsed");
        assert_eq!(
            p,
            ReplicationParams {
                policy: None,
                source_cluster: None,
                method: Method::Async
            }
        );
    }

    #[test]
    fn policy_source_and_sync_site_are_read() {
        let pol = Uuid::from_u128(1);
        let src = Uuid::from_u128(2);
        let p = ReplicationParams::parse(&params(&[
            (POLICY_ID, &pol.to_string()),
            (SOURCE_CLUSTER_ID, &src.to_string()),
            (METHOD, "sync"),
            (SITE, "site-a.eu_1"),
        ]))
        .expect("parsed");
        assert_eq!(p.policy, Some(pol));
        assert_eq!(p.source_cluster, Some(src));
        assert_eq!(
            p.method,
            Method::Sync {
                site: "site-a.eu_1".into()
            }
        );
    }

    #[test]
    fn unusable_values_are_invalid_arguments() {
        assert!(refusal(&[(POLICY_ID, "gold")]).contains("replicationPolicyID"));
        assert!(refusal(&[(SOURCE_CLUSTER_ID, "east")]).contains("sourceClusterID"));
        assert!(refusal(&[(METHOD, "semi")]).contains("use async or sync"));
        assert!(
            refusal(&[(METHOD, "sync")]).contains("no replication.storage.simplyblock.io/site")
        );
        assert!(refusal(&[(METHOD, "sync"), (SITE, "-a")]).contains("not a site name"));
        assert!(refusal(&[(METHOD, "sync"), (SITE, "a b")]).contains("not a site name"));
    }

    #[test]
    fn site_names_at_and_past_the_limit() {
        assert!(valid_site(&"a".repeat(63)));
        assert!(!valid_site(&"a".repeat(64)));
        assert!(valid_site("0"));
        assert!(!valid_site(""));
        assert!(!valid_site("é"));
    }

    fn cp(status: u16) -> simplyblock_controlplane::Error {
        use simplyblock_controlplane::Error as Cp;
        let (method, path, message) = ("POST".to_string(), "/x".to_string(), "m".to_string());
        match status {
            409 => Cp::Conflict {
                method,
                path,
                message,
            },
            _ => Cp::Refused {
                method,
                path,
                status,
                message,
                opaque: false,
            },
        }
    }

    #[test]
    fn sync_route_statuses_map_as_the_sidecar_expects() {
        assert_eq!(sync_route_error(cp(412)).code(), Code::FailedPrecondition);
        assert_eq!(sync_route_error(cp(400)).code(), Code::InvalidArgument);
        assert_eq!(sync_route_error(cp(409)).code(), Code::Unavailable);
        assert_eq!(sync_route_error(cp(500)).code(), Code::Unavailable);
    }
}
