//! Tests of `events`: what a denial feeds the shared writer.
use super::*;

fn object(kind: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: "team-a".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn denial() -> DenialEvent {
    DenialEvent {
        reason: "QuotaExceeded",
        note: "ResourceBinding team-a/web-deployment denied: exceeded quota: q".into(),
        template: Some(object("Deployment", "web")),
        quota: Some(object("KarmadaQuota", "q")),
    }
}

#[test]
fn one_denial_feeds_a_warning_on_the_template_and_one_on_the_quota_each_related_to_the_other() {
    let keys = denial().series();
    let seen: Vec<_> = keys
        .iter()
        .map(|k| {
            (
                k.regarding.name.as_str(),
                k.related.as_ref().map(|r| r.name.as_str()),
                k.type_,
                k.action,
                k.reason,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "web",
                Some("q"),
                EventType::Warning,
                ACTION,
                "QuotaExceeded"
            ),
            (
                "q",
                Some("web"),
                EventType::Warning,
                ACTION,
                "QuotaExceeded"
            ),
        ]
    );
    assert!(keys.iter().all(|k| k.note == denial().note));
}

#[test]
fn a_denial_without_a_template_or_quota_feeds_only_what_it_names() {
    let quota_only = DenialEvent {
        template: None,
        ..denial()
    };
    let keys = quota_only.series();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0].regarding.kind, "KarmadaQuota");
    assert!(keys[0].related.is_none());
}

#[test]
fn a_long_note_is_cut_to_the_apiservers_limit() {
    let long = DenialEvent {
        note: "é".repeat(NOTE_LIMIT),
        ..denial()
    };
    assert!(
        long.series()
            .iter()
            .all(|k| k.note.len() <= NOTE_LIMIT && k.note.len() > NOTE_LIMIT - 2)
    );
}
