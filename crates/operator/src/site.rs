//! StorageSiteDeployment: what the site reports decides the request's phase and
//! conditions. This module is the pure part of the controller: given what was read back
//! from the site, the status to write.

use simplyblock_api::cluster_deployment_config::DeploymentPhase;
use simplyblock_api::storage_site_deployment::{
    APPROVED, DELIVERED, DISCOVERED, READY, SiteDraft, SitePhase, SiteStorageCluster,
};

/// What was read back from the site.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SiteState {
    /// Why the site refused the request's work; `None` when it was applied.
    pub refused: Option<String>,
    /// Whether the work was applied on the site.
    pub delivered: bool,
    pub draft: Option<SiteDraft>,
    pub cluster: Option<SiteStorageCluster>,
}

/// One condition as the status states it: type, whether it holds, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub type_: &'static str,
    pub holds: bool,
    pub reason: &'static str,
}

fn has_nodes(draft: &SiteDraft) -> bool {
    !draft.node_sets.is_empty()
}

fn online(cluster: &SiteStorageCluster) -> bool {
    cluster.phase.as_deref() == Some("Online") && cluster.uuid.is_some()
}

/// The phase of the request and the message that goes with it.
pub fn phase(state: &SiteState) -> (SitePhase, Option<String>) {
    if let Some(why) = &state.refused {
        return (
            SitePhase::Failed,
            Some(format!(
                "the site refused the request's work: {why}; fix the cause on the site, the request is retried"
            )),
        );
    }
    let Some(draft) = state.draft.as_ref().filter(|d| has_nodes(d)) else {
        return (SitePhase::Discovering, None);
    };
    if draft.phase == Some(DeploymentPhase::Failed) {
        let why = draft.message.as_deref().unwrap_or("no reason given");
        return (
            SitePhase::Failed,
            Some(format!("the site's draft {} failed: {why}", draft.name)),
        );
    }
    if !draft.approved {
        return (
            SitePhase::Drafted,
            Some(format!(
                "review the draft in status.draft and set spec.approved to deploy it as {}",
                draft.cluster.as_deref().unwrap_or("the drafted cluster")
            )),
        );
    }
    match &state.cluster {
        // Both, because the site's views are read back each on its own schedule: a cluster
        // seen Online beside a draft still seen Expanding is a deployment not yet settled.
        Some(c) if online(c) && draft.phase == Some(DeploymentPhase::Expanded) => {
            (SitePhase::Online, None)
        }
        Some(c)
            if draft.phase == Some(DeploymentPhase::Expanded)
                && c.phase.as_deref() == Some("Unavailable") =>
        {
            (
                SitePhase::Failed,
                Some(format!(
                    "the site's StorageCluster {} is Unavailable after its deployment; see its status on the site",
                    c.name
                )),
            )
        }
        _ => (SitePhase::Deploying, None),
    }
}

/// The four conditions, in the order a deployment reaches them.
pub fn conditions(state: &SiteState) -> [Verdict; 4] {
    let verdict = |type_, holds, yes, no| Verdict {
        type_,
        holds,
        reason: if holds { yes } else { no },
    };
    let draft = state.draft.as_ref();
    [
        verdict(
            DELIVERED,
            state.delivered && state.refused.is_none(),
            "WorkApplied",
            if state.refused.is_some() {
                "WorkRefused"
            } else {
                "WorkPending"
            },
        ),
        verdict(
            DISCOVERED,
            draft.is_some_and(has_nodes),
            "DraftHasNodes",
            "DiscoveryRunning",
        ),
        verdict(
            APPROVED,
            draft.is_some_and(|d| d.approved),
            "DraftApproved",
            "AwaitingApproval",
        ),
        verdict(
            READY,
            state.cluster.as_ref().is_some_and(online),
            "ClusterOnline",
            "ClusterNotOnline",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(nodes: bool, approved: bool, phase: DeploymentPhase) -> Option<SiteDraft> {
        Some(SiteDraft {
            name: "site-draft".into(),
            phase: Some(phase),
            approved,
            cluster: Some("simplyblock".into()),
            node_sets: if nodes { vec!["rack-a".into()] } else { vec![] },
            ..SiteDraft::default()
        })
    }

    fn cluster(phase: &str, uuid: bool) -> Option<SiteStorageCluster> {
        Some(SiteStorageCluster {
            name: "simplyblock".into(),
            uuid: uuid.then(|| "u".into()),
            phase: Some(phase.into()),
            ..SiteStorageCluster::default()
        })
    }

    fn state(draft: Option<SiteDraft>, cluster: Option<SiteStorageCluster>) -> SiteState {
        SiteState {
            refused: None,
            delivered: true,
            draft,
            cluster,
        }
    }

    #[test]
    fn the_site_state_table() {
        use DeploymentPhase::*;
        let refused = SiteState {
            refused: Some("forbidden".into()),
            ..state(draft(true, true, Expanded), cluster("Online", true))
        };
        let table = [
            (refused, SitePhase::Failed),
            (state(None, None), SitePhase::Discovering),
            (
                state(draft(false, false, Draft), None),
                SitePhase::Discovering,
            ),
            (state(draft(true, false, Failed), None), SitePhase::Failed),
            (state(draft(true, false, Draft), None), SitePhase::Drafted),
            (
                state(draft(true, true, Expanding), None),
                SitePhase::Deploying,
            ),
            (
                state(draft(true, true, Expanding), cluster("Provisioning", true)),
                SitePhase::Deploying,
            ),
            (
                state(draft(true, true, Expanded), cluster("Online", false)),
                SitePhase::Deploying,
            ),
            (
                state(draft(true, true, Expanding), cluster("Online", true)),
                SitePhase::Deploying,
            ),
            (
                state(draft(true, true, Expanded), cluster("Online", true)),
                SitePhase::Online,
            ),
            (
                state(draft(true, true, Expanded), cluster("Unavailable", true)),
                SitePhase::Failed,
            ),
        ];
        for (site, expected) in table {
            assert_eq!(phase(&site).0, expected, "{site:?}");
        }
    }

    #[test]
    fn failures_say_why_and_drafted_says_what_to_do() {
        let mut failed = draft(true, false, DeploymentPhase::Failed);
        if let Some(d) = failed.as_mut() {
            d.message = Some("worker w-9 has no NVMe device".into());
        }
        let (_, message) = phase(&state(failed, None));
        assert_eq!(
            message.as_deref(),
            Some("the site's draft site-draft failed: worker w-9 has no NVMe device")
        );
        let (_, message) = phase(&state(draft(true, false, DeploymentPhase::Draft), None));
        assert!(message.is_some_and(|m| m.contains("spec.approved") && m.contains("simplyblock")));
    }

    #[test]
    fn conditions_follow_the_deployment() {
        let holding = |s: &SiteState| {
            conditions(s)
                .iter()
                .filter(|v| v.holds)
                .map(|v| v.type_)
                .collect::<Vec<_>>()
        };
        let undelivered = SiteState {
            delivered: false,
            ..SiteState::default()
        };
        assert!(holding(&undelivered).is_empty());
        assert_eq!(
            holding(&state(draft(true, false, DeploymentPhase::Draft), None)),
            [DELIVERED, DISCOVERED]
        );
        assert_eq!(
            holding(&state(
                draft(true, true, DeploymentPhase::Expanded),
                cluster("Online", true)
            )),
            [DELIVERED, DISCOVERED, APPROVED, READY]
        );
        let refused = SiteState {
            refused: Some("forbidden".into()),
            ..SiteState::default()
        };
        assert_eq!(conditions(&refused)[0].reason, "WorkRefused");
    }
}
