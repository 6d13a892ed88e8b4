//! The plan step alone: no store is written, no reconcile runs.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_crds::KarmadaQuota;
use karmada_quota_status::fake::FakeStore;
use kube::runtime::watcher::Event;

use super::plan;
use crate::index::Index;
use crate::reconcile::{Ctx, FOLD_BATCH, KindCtx};
use crate::testutil::*;

const FAR: i64 = 4_000_000_000;

fn key() -> (String, String) {
    ("team-a".to_owned(), "q".to_owned())
}

/// The context of a plan over these bindings (listed), its pacing set by `f`.
fn ctx(
    bindings: &[karmada_quota_crds::ResourceBinding],
    f: impl FnOnce(Ctx) -> Ctx,
) -> KindCtx<KarmadaQuota> {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, 0);
    for b in bindings {
        i.apply_binding_event(&Event::InitApply(b.clone()), None, 0);
    }
    i.apply_binding_event(&Event::InitDone, None, 0);
    let (base, _tx) = base_ctx(i, true);
    KindCtx {
        base: Arc::new(f(base)),
        store: FakeStore::with(&[]),
        own: (),
    }
}

/// Quota "q" as the last write left it: used = 3 pods ("web"), and `entries` the
/// webhook added since.
fn written_quota(
    c: &KindCtx<KarmadaQuota>,
    entries: Vec<karmada_quota_crds::quota::Reservation>,
) -> KarmadaQuota {
    let mut q = mk_quota("team-a", "q", &[("pods", "10")]);
    let (status, _) = plan(c, &key(), &q);
    let mut status = status.expect("a fresh quota gets a status");
    status.reservations = entries;
    q.status = Some(status);
    q
}

#[test]
fn a_fresh_quota_is_planned_a_status_and_nothing_is_put_off() {
    let web = mk_binding("team-a", "web", "u1", 1, 3, "1", &[]);
    let c = ctx(&[web], |c| c.with_fold_interval(Duration::from_secs(60)));
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let (status, p) = plan(&c, &key(), &q);
    assert_eq!(status.expect("a status").used["pods"].0, "3");
    assert!(p.computation.is_some());
    assert_eq!(p.fold_after, None);
}

#[test]
fn a_quota_as_planned_is_planned_no_status() {
    let web = mk_binding("team-a", "web", "u1", 1, 3, "1", &[]);
    let c = ctx(&[web], |c| c);
    let q = written_quota(&c, Vec::new());
    let (status, p) = plan(&c, &key(), &q);
    assert!(status.is_none(), "{status:?}");
    assert_eq!(p.fold_after, None);
}

/// "api" (2 pods) was admitted after the last write (an entry), and is now observed.
fn observe_api(c: &KindCtx<KarmadaQuota>) {
    c.index.write().apply_binding_event(
        &Event::Apply(mk_binding("team-a", "api", "u2", 1, 2, "1", &[])),
        None,
        0,
    );
}

fn api_entry() -> karmada_quota_crds::quota::Reservation {
    mk_reservation("api", "u2", 1, &[("pods", "2")], FAR)
}

#[test]
fn a_fold_only_change_soon_after_a_write_is_put_off_by_the_plan() {
    let web = mk_binding("team-a", "web", "u1", 1, 3, "1", &[]);
    let c = ctx(&[web], |c| c.with_fold_interval(Duration::from_secs(60)));
    let q = written_quota(&c, vec![api_entry()]);
    observe_api(&c);
    // Folding the entry into used changes nothing admission reads.
    c.pacing.wrote(&key());
    let (status, p) = plan(&c, &key(), &q);
    assert!(status.is_none(), "put off: {status:?}");
    let wait = p.fold_after.expect("the put-off is returned");
    assert!(
        wait > Duration::from_secs(50) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
    assert!(p.computation.is_some());
    // Without a write to space from it is planned at once.
    c.pacing.forget(&key());
    let (status, p) = plan(&c, &key(), &q);
    let status = status.expect("folded");
    assert_eq!(status.used["pods"].0, "5");
    assert!(status.reservations.is_empty());
    assert_eq!(p.fold_after, None);
}

#[test]
fn a_fold_is_not_put_off_without_an_interval_or_with_many_entries() {
    let web = mk_binding("team-a", "web", "u1", 1, 3, "1", &[]);
    let unpaced = ctx(std::slice::from_ref(&web), |c| c);
    let q = written_quota(&unpaced, vec![api_entry()]);
    observe_api(&unpaced);
    unpaced.pacing.wrote(&key());
    let (status, p) = plan(&unpaced, &key(), &q);
    assert!(status.is_some(), "no --fold-interval: written at once");
    assert_eq!(p.fold_after, None);
    // FOLD_BATCH entries still pending after the fold: written at once.
    let paced = ctx(&[web], |c| c.with_fold_interval(Duration::from_secs(60)));
    let mut entries = vec![api_entry()];
    for n in 0..FOLD_BATCH {
        let (name, uid) = (format!("w{n}"), format!("uw{n}"));
        entries.push(mk_reservation(&name, &uid, 1, &[("pods", "0")], FAR));
    }
    let q = written_quota(&paced, entries);
    observe_api(&paced);
    paced.pacing.wrote(&key());
    let (status, p) = plan(&paced, &key(), &q);
    assert_eq!(
        status.expect("written at once").reservations.len(),
        FOLD_BATCH
    );
    assert_eq!(p.fold_after, None);
}

#[test]
fn a_change_of_usage_is_never_put_off() {
    let web = mk_binding("team-a", "web", "u1", 1, 3, "1", &[]);
    let c = ctx(std::slice::from_ref(&web), |c| {
        c.with_fold_interval(Duration::from_secs(60))
    });
    let q = written_quota(&c, vec![api_entry()]);
    observe_api(&c);
    // "web" is deleted: effective usage falls.
    c.index
        .write()
        .apply_binding_event(&Event::Delete(web), None, 0);
    c.pacing.wrote(&key());
    let (status, p) = plan(&c, &key(), &q);
    let status = status.expect("written at once");
    assert_eq!(status.used["pods"].0, "2");
    assert!(status.reservations.is_empty());
    assert_eq!(p.fold_after, None);
}
