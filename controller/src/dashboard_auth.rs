//! `--dashboard-auth=kubernetes`: the dashboard's [`Reviewer`] backed by the control
//! plane's API server — a TokenReview (authentication.k8s.io/v1) says who a bearer token
//! is, a SubjectAccessReview (authorization.k8s.io/v1) whether that user may `list
//! karmadaquotas.quota.karmada.io` in a namespace. The dashboard crate caches the
//! answers and filters what each request sees; this module only asks. The controller's
//! ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews` (the chart
//! grants both).
//!
//! With `--dashboard-token-audiences`, the TokenReview asks for those audiences and a
//! token is accepted only when the review's `status.audiences` names one of them: a token
//! issued for another service (another audience) is refused.

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use karmada_quota_dashboard::auth::{
    QUOTA_GROUP, QUOTA_RESOURCE, QUOTA_VERB, Review, ReviewError, Reviewer, User,
};
use kube::api::PostParams;
use kube::{Api, Client};

/// Asks the API server.
#[derive(Clone)]
pub struct KubeReviewer {
    tokens: Api<TokenReview>,
    access: Api<SubjectAccessReview>,
    audiences: Vec<String>,
}

impl KubeReviewer {
    /// Reviews with `client` (the controller's own identity), accepting tokens for
    /// `audiences` (empty: the API server's own).
    pub fn new(client: Client, audiences: Vec<String>) -> Self {
        Self {
            tokens: Api::all(client.clone()),
            access: Api::all(client),
            audiences: audiences
                .into_iter()
                .filter(|a| !a.trim().is_empty())
                .collect(),
        }
    }
}

/// The TokenReview of `token`, for `audiences` (empty: the API server's own).
pub fn token_review(token: &str, audiences: &[String]) -> TokenReview {
    TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: (!audiences.is_empty()).then(|| audiences.to_vec()),
        },
        ..TokenReview::default()
    }
}

/// The user a reviewed TokenReview reports, when the token was accepted — for one of
/// `audiences` when any are required.
pub fn user_of(review: &TokenReview, audiences: &[String]) -> Option<User> {
    let status = review.status.as_ref()?;
    if status.authenticated != Some(true) {
        return None;
    }
    if !audiences.is_empty() {
        let granted = status.audiences.as_deref().unwrap_or_default();
        if !granted.iter().any(|a| audiences.contains(a)) {
            return None;
        }
    }
    let info = status.user.as_ref()?;
    let name = info.username.clone().filter(|n| !n.is_empty())?;
    Some(User {
        name,
        uid: info.uid.clone().unwrap_or_default(),
        groups: info.groups.clone().unwrap_or_default(),
        extra: info.extra.clone().unwrap_or_default(),
    })
}

/// The SubjectAccessReview "may `user` list KarmadaQuotas in `namespace`" (`None`: in
/// every namespace).
pub fn access_review(user: &User, namespace: Option<&str>) -> SubjectAccessReview {
    let opt_vec = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
            groups: opt_vec(&user.groups),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(QUOTA_GROUP.to_owned()),
                resource: Some(QUOTA_RESOURCE.to_owned()),
                verb: Some(QUOTA_VERB.to_owned()),
                namespace: namespace.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    }
}

impl Reviewer for KubeReviewer {
    fn authenticate<'a>(&'a self, token: &'a str) -> Review<'a, Option<User>> {
        Box::pin(async move {
            let answer = self
                .tokens
                .create(
                    &PostParams::default(),
                    &token_review(token, &self.audiences),
                )
                .await
                .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
            Ok(user_of(&answer, &self.audiences))
        })
    }

    fn may_list<'a>(&'a self, user: &'a User, namespace: Option<&'a str>) -> Review<'a, bool> {
        Box::pin(async move {
            let answer = self
                .access
                .create(&PostParams::default(), &access_review(user, namespace))
                .await
                .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
            Ok(answer.status.is_some_and(|s| s.allowed))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::authentication::v1::{TokenReviewStatus, UserInfo};

    fn reviewed(authenticated: Option<bool>, username: Option<&str>) -> TokenReview {
        TokenReview {
            status: Some(TokenReviewStatus {
                authenticated,
                user: Some(UserInfo {
                    username: username.map(str::to_owned),
                    uid: Some("u-1".into()),
                    groups: Some(vec!["team-a".into(), "system:authenticated".into()]),
                    extra: Some([("scopes".to_owned(), vec!["view".to_owned()])].into()),
                }),
                ..TokenReviewStatus::default()
            }),
            ..token_review("t", &[])
        }
    }

    #[test]
    fn an_accepted_token_gives_its_user_with_groups_and_extra() {
        let u = user_of(&reviewed(Some(true), Some("alice")), &[]).unwrap();
        assert_eq!(u.name, "alice");
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.groups, ["team-a", "system:authenticated"]);
        assert_eq!(u.extra["scopes"], ["view"]);
    }

    #[test]
    fn a_refused_or_anonymous_review_gives_no_user() {
        assert!(user_of(&reviewed(Some(false), Some("alice")), &[]).is_none());
        assert!(user_of(&reviewed(None, Some("alice")), &[]).is_none());
        assert!(user_of(&reviewed(Some(true), None), &[]).is_none());
        assert!(user_of(&reviewed(Some(true), Some("")), &[]).is_none());
        assert!(user_of(&token_review("t", &[]), &[]).is_none());
        assert_eq!(token_review("abc", &[]).spec.token.as_deref(), Some("abc"));
        assert_eq!(token_review("abc", &[]).spec.audiences, None);
    }

    #[test]
    fn with_audiences_a_token_for_another_audience_is_refused() {
        let want = vec!["kq-dashboard".to_owned()];
        let review = token_review("t", &want);
        assert_eq!(review.spec.audiences.as_deref(), Some(&want[..]));
        let with = |granted: Option<Vec<&str>>| {
            let mut r = reviewed(Some(true), Some("alice"));
            r.status.as_mut().unwrap().audiences =
                granted.map(|g| g.into_iter().map(str::to_owned).collect());
            r
        };
        assert!(user_of(&with(Some(vec!["kq-dashboard"])), &want).is_some());
        assert!(user_of(&with(Some(vec!["other", "kq-dashboard"])), &want).is_some());
        for refused in [
            None,
            Some(vec![]),
            Some(vec!["https://kubernetes.default.svc"]),
        ] {
            assert!(
                user_of(&with(refused.clone()), &want).is_none(),
                "{refused:?}"
            );
        }
        // No audience asked: the API server's own decision stands.
        assert!(user_of(&with(None), &[]).is_some());
    }

    #[test]
    fn the_access_review_asks_list_karmadaquotas_for_the_reviewed_user() {
        let u = user_of(&reviewed(Some(true), Some("alice")), &[]).unwrap();
        let sar = access_review(&u, Some("team-a"));
        let json = serde_json::to_value(&sar).unwrap();
        assert_eq!(json["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(json["kind"], "SubjectAccessReview");
        assert_eq!(json["spec"]["user"], "alice");
        assert_eq!(json["spec"]["uid"], "u-1");
        assert_eq!(json["spec"]["groups"][0], "team-a");
        assert_eq!(json["spec"]["extra"]["scopes"][0], "view");
        let attrs = &json["spec"]["resourceAttributes"];
        assert_eq!(attrs["group"], "quota.karmada.io");
        assert_eq!(attrs["resource"], "karmadaquotas");
        assert_eq!(attrs["verb"], "list");
        assert_eq!(attrs["namespace"], "team-a");
        let everywhere = serde_json::to_value(access_review(&User::default(), None)).unwrap();
        assert!(everywhere["spec"]["resourceAttributes"]["namespace"].is_null());
        assert!(everywhere["spec"]["groups"].is_null());
    }
}
