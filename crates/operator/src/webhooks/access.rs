//! What a requester may reach. A controller acts as the operator, which may read every
//! claim and create in any namespace; an object that reaches claims must reach only what
//! the person who wrote it may. The requester is known only at admission: the API server
//! is asked, as them (SubjectAccessReviews carrying `request.userInfo`), for each right.

use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::Api;

/// One right on PersistentVolumeClaims the requester needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    pub verb: &'static str,
    /// `None`: in every namespace.
    pub namespace: Option<String>,
    /// `None`: every claim of the namespace.
    pub name: Option<String>,
    /// What the object does with it.
    pub purpose: &'static str,
}

impl Access {
    pub fn describe(&self) -> String {
        let what = match &self.name {
            Some(name) => format!("persistentvolumeclaim {name}"),
            None => "persistentvolumeclaims".to_owned(),
        };
        match &self.namespace {
            Some(ns) => format!("{} {what} in namespace {ns}", self.verb),
            None => format!("{} {what} in every namespace", self.verb),
        }
    }

    /// The sentence of a refusal: who may not do what, why it matters, what to do.
    /// `reason` is the authorizer's, when it gave one; `object` names what is refused
    /// ("a drill", "a restore").
    pub fn refusal(&self, user: &str, reason: &str, object: &str) -> String {
        let reason = if reason.is_empty() {
            String::new()
        } else {
            format!(" ({reason})")
        };
        format!(
            "Forbidden: {user} may not {}{reason}, and {}; {object} reaches only what its requester may: ask for that right, or have someone who holds it create it",
            self.describe(),
            self.purpose
        )
    }
}

/// The rights of `needed` the API server denies `user`, each with the authorizer's reason.
/// `Err` is the sentence of a review that could not be asked.
pub async fn denied(
    client: &kube::Client,
    user: &UserInfo,
    needed: Vec<Access>,
) -> Result<Vec<(Access, String)>, String> {
    let name = user.username.clone().unwrap_or_default();
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut denied = Vec::new();
    for access in needed {
        let asked = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups.clone(),
                uid: user.uid.clone(),
                extra: user.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(access.verb.into()),
                    group: Some(String::new()),
                    resource: Some("persistentvolumeclaims".into()),
                    namespace: access.namespace.clone(),
                    name: access.name.clone(),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = reviews
            .create(&Default::default(), &asked)
            .await
            .map_err(|e| {
                format!(
                    "whether {name} may {} could not be asked ({e}); try again",
                    access.describe()
                )
            })?;
        let status = answer.status.unwrap_or_default();
        if !status.allowed || status.denied == Some(true) {
            denied.push((access, status.reason.unwrap_or_default()));
        }
    }
    Ok(denied)
}
