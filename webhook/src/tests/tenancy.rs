//! Who may change a quota (docs/security.md, threat 11): only administrators create, delete or change
//! the spec (labels, owners) of KarmadaQuotas and KarmadaClusterQuotas; annotations,
//! finalizers and the status subresource are not theirs alone.

use super::*;
use crate::tenancy::QuotaAdmins;

const KCQ: (&str, &str, &str) = ("quota.karmada.io", "v1alpha1", "KarmadaClusterQuota");
const TENANT: &str = "alice";

fn quota_obj(cpu: &str) -> Value {
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": "compute", "namespace": NS},
        "spec": {"hard": {"requests.cpu": cpu}}
    })
}

fn cluster_quota_obj(cpu: &str) -> Value {
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": "business-a"},
        "spec": {"namespaceSelector": {"matchLabels": {"business": "a"}}, "hard": {"requests.cpu": cpu}}
    })
}

/// `review` sent by `user` in `groups` (`None`: no userInfo at all).
fn by(mut review: Value, user: Option<&str>, groups: &[&str]) -> Value {
    match user {
        Some(u) => review["request"]["userInfo"] = json!({"username": u, "groups": groups}),
        None => {
            review["request"]
                .as_object_mut()
                .unwrap()
                .remove("userInfo");
        }
    }
    review
}

fn tenant(review: Value) -> Value {
    by(
        review,
        Some(TENANT),
        &["team-a-admins", "system:authenticated"],
    )
}

fn raise(old: &str, new: &str) -> Value {
    mk_review(
        "UPDATE",
        KQ,
        "karmadaquotas",
        Some(quota_obj(new)),
        Some(quota_obj(old)),
        false,
    )
}

fn delete(old: Option<Value>) -> Value {
    let mut r = mk_review("DELETE", KQ, "karmadaquotas", None, old, false);
    r["request"]["name"] = json!("compute");
    r
}

fn with_admins(users: &[&str], groups: &[&str]) -> Harness {
    let mut h = Harness::new(&[]);
    h.state.settings.quota_admins = QuotaAdmins::new(
        users.iter().map(|s| (*s).to_owned()),
        groups.iter().map(|s| (*s).to_owned()),
    );
    h
}

async fn review_cluster(h: &Harness, review: Value) -> Value {
    let (code, body) = h
        .post(
            crate::admission::KARMADACLUSTERQUOTA_PATH,
            review.to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{body}");
    body["response"].clone()
}

#[tokio::test]
async fn a_member_of_an_admin_group_changes_and_deletes_quotas() {
    let h = Harness::new(&[]);
    let admin = |r| {
        by(
            r,
            Some("system:admin"),
            &["system:masters", "system:authenticated"],
        )
    };
    let resp = h.review_quota(admin(raise("10", "20"))).await;
    assert!(verdict(&resp).0, "{resp}");
    let resp = h.review_quota(admin(delete(Some(quota_obj("10"))))).await;
    assert!(verdict(&resp).0, "{resp}");
    let update = mk_review(
        "UPDATE",
        KCQ,
        "karmadaclusterquotas",
        Some(cluster_quota_obj("50")),
        Some(cluster_quota_obj("10")),
        false,
    );
    let resp = review_cluster(&h, admin(update)).await;
    assert!(verdict(&resp).0, "{resp}");
}

#[tokio::test]
async fn a_configured_admin_user_changes_quotas_and_a_configured_group_too() {
    let h = with_admins(&["platform-bot"], &["platform"]);
    let resp = h
        .review_quota(by(raise("10", "20"), Some("platform-bot"), &[]))
        .await;
    assert!(verdict(&resp).0, "{resp}");
    let resp = h
        .review_quota(by(raise("10", "20"), Some("bob"), &["platform"]))
        .await;
    assert!(verdict(&resp).0, "{resp}");
    // system:masters is no longer configured: refused.
    let resp = h
        .review_quota(by(
            raise("10", "20"),
            Some("system:admin"),
            &["system:masters"],
        ))
        .await;
    assert!(!verdict(&resp).0, "{resp}");
}

#[tokio::test]
async fn a_tenant_is_refused_with_who_what_and_how_to_allow_it() {
    let h = Harness::new(&[]);
    for (review, what) in [
        (raise("10", "20"), "may not change its spec"),
        (delete(Some(quota_obj("10"))), "may not delete it"),
        (
            mk_review(
                "CREATE",
                KQ,
                "karmadaquotas",
                Some(quota_obj("5")),
                None,
                false,
            ),
            "may not create it",
        ),
    ] {
        let (allowed, code, reason, message) = verdict(&h.review_quota(tenant(review)).await);
        assert!(!allowed, "{message}");
        assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
        for part in [
            "KarmadaQuota team-a/compute: user \"alice\" (groups: team-a-admins,system:authenticated)",
            what,
            "only quota administrators may create, delete or change the spec",
            "--quota-admin-groups=system:masters",
            "add \"alice\" to --quota-admin-users or one of its groups to --quota-admin-groups",
        ] {
            assert!(message.contains(part), "{message}\n lacks: {part}");
        }
    }
    // A KarmadaClusterQuota likewise.
    let update = mk_review(
        "UPDATE",
        KCQ,
        "karmadaclusterquotas",
        Some(cluster_quota_obj("50")),
        Some(cluster_quota_obj("10")),
        false,
    );
    let (allowed, code, _, message) = verdict(&review_cluster(&h, tenant(update)).await);
    assert!(!allowed && code == 403, "{message}");
    assert!(
        message.starts_with("KarmadaClusterQuota business-a: user \"alice\""),
        "{message}"
    );
}

#[tokio::test]
async fn labels_and_owners_are_the_admins_annotations_and_finalizers_anyones() {
    let h = Harness::new(&[]);
    let old = quota_obj("10");
    let mut labelled = old.clone();
    labelled["metadata"]["labels"] = json!({"skip-webhook": "yes"});
    let mut owned = old.clone();
    owned["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "u"}]);
    let mut annotated = old.clone();
    annotated["metadata"]["annotations"] = json!({"note": "hi"});
    annotated["metadata"]["finalizers"] = json!(["example.com/keep"]);
    let update = |new: &Value| {
        tenant(mk_review(
            "UPDATE",
            KQ,
            "karmadaquotas",
            Some(new.clone()),
            Some(old.clone()),
            false,
        ))
    };
    let (allowed, _, _, message) = verdict(&h.review_quota(update(&labelled)).await);
    assert!(
        !allowed && message.contains("may not change its labels"),
        "{message}"
    );
    let (allowed, _, _, message) = verdict(&h.review_quota(update(&owned)).await);
    assert!(
        !allowed && message.contains("may not change its ownerReferences"),
        "{message}"
    );
    let (allowed, _, _, message) = verdict(&h.review_quota(update(&annotated)).await);
    assert!(allowed, "{message}");
}

#[tokio::test]
async fn a_delete_without_old_object_is_judged_by_its_user_and_request_name() {
    let h = Harness::new(&[]);
    let (allowed, code, _, message) = verdict(&h.review_quota(tenant(delete(None))).await);
    assert!(!allowed && code == 403, "{message}");
    assert!(
        message.starts_with("KarmadaQuota team-a/compute: user \"alice\""),
        "{message}"
    );
    assert!(message.contains("may not delete it"), "{message}");
    let admin = by(delete(None), Some("system:admin"), &["system:masters"]);
    assert!(verdict(&h.review_quota(admin).await).0);
}

#[tokio::test]
async fn a_review_without_user_info_or_user_name_is_refused() {
    let h = Harness::new(&[]);
    // No userInfo at all: not a review the API server sends; refused as malformed.
    let (allowed, code, _, message) =
        verdict(&h.review_quota(by(raise("10", "20"), None, &[])).await);
    assert!(!allowed && code == 400, "{message}");
    // A userInfo without a name, even in an admin group: refused, saying so.
    let mut review = raise("10", "20");
    review["request"]["userInfo"] = json!({"groups": ["system:masters"]});
    let (allowed, code, _, message) = verdict(&h.review_quota(review).await);
    assert!(!allowed && code == 403, "{message}");
    assert!(message.contains("a request without a user"), "{message}");
}

#[tokio::test]
async fn the_status_subresource_is_not_guarded() {
    // Every reservation is a status write: the review never judges who writes status
    // (RBAC grants it to the project's ServiceAccounts only). The chart registers no
    // rule for karmadaquotas/status; if a configuration sent one, it passes.
    let h = Harness::new(&[]);
    let mut old = quota_obj("10");
    old["status"] = json!({"used": {"requests.cpu": "1"}});
    let mut new = old.clone();
    new["status"] = json!({"used": {"requests.cpu": "0"}});
    let mut review = tenant(mk_review(
        "UPDATE",
        KQ,
        "karmadaquotas",
        Some(new),
        Some(old),
        false,
    ));
    review["request"]["subResource"] = json!("status");
    let resp = h.review_quota(review).await;
    assert!(verdict(&resp).0, "{resp}");
}
