//! Feeds the browser dashboard (the `karmada-quota-dashboard` crate): maps the computed
//! views, the member registry, the namespaces' team labels and the quotas' Warning events
//! into the dashboard's own [`Snapshot`], and serves it on `--dashboard-listen` through the
//! runtime's hardened listener (its limits; HTTPS with `--dashboard-tls-*`).
//!
//! ```text
//!  api::Views ─────────┐ each pokes its Changes when what it holds changed (reconcile
//!  MemberRegistry ─────┤ publishes a view; a member's reach; a namespace; a Warning);
//!  namespaces ─────────┤ leadership is a watch of its own
//!  Event watch ────────┘        │ feed() awaits any (at most one rebuild per MIN_GAP)
//!                               ▼
//!                  snapshot() ─► watch::Sender<Arc<Snapshot>> ─► dashboard::router
//!                                                               (pages, SSE, JSON, CSV)
//! ```
//!
//! Read-only: the dashboard gets computed numbers, never an object or a Secret.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use karmada_quota_dashboard::model::{Denial, Member, Reach as DashReach, Snapshot};
use karmada_quota_dashboard::{Access, Dashboard, Settings};
use karmada_quota_shell::listener::{self, Limits, ServerTls, TlsFiles};
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::watcher;
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::api::Views;
use karmada_quota_dashboard::model::Quota;

use crate::changes::Changes;
use crate::members::{MemberRegistry, Reach};
use crate::namespaces::NamespaceLabels;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// The least time between two rebuilds of the snapshot: a burst of changes (a re-list,
/// many quotas reconciled at once) is sent as one.
const MIN_GAP: Duration = Duration::from_millis(250);
/// With no change, the snapshot is still re-sent this often, so data ages on the pages
/// advance.
const REFRESH_INTERVAL: Duration = Duration::from_secs(10);
/// Warning events kept per quota.
const EVENTS_PER_QUOTA: usize = 20;

/// (namespace, quota) → recent Warning events, newest first.
pub type Warnings = Arc<RwLock<BTreeMap<(String, String), VecDeque<Denial>>>>;

/// Member name → since when (Unix seconds) its data is not live.
#[derive(Debug, Default)]
pub struct Freshness {
    last_live: BTreeMap<String, i64>,
}

impl Freshness {
    /// The dashboard's view of `reach` at `now`, remembering when each member was last live.
    pub fn member(&mut self, name: &str, reach: &Reach, now: i64) -> Member {
        let (reach, message) = match reach {
            Reach::Reachable | Reach::Unverified(_) => (DashReach::Reachable, None),
            Reach::Connecting => (DashReach::Connecting, None),
            Reach::Unreachable(e) => (DashReach::Unreachable, Some(e.clone())),
        };
        let stale_since = if reach == DashReach::Reachable {
            self.last_live.insert(name.to_owned(), now);
            None
        } else {
            Some(*self.last_live.entry(name.to_owned()).or_insert(now))
        };
        Member {
            name: name.to_owned(),
            reach,
            message,
            stale_since,
        }
    }
}

/// Everything the feeder reads.
#[derive(Clone)]
pub struct Sources {
    /// Computed reports.
    pub views: Views,
    /// Members' reachability: measured here, or read from the quotas' status.
    pub members: MemberSource,
    /// Leadership.
    pub leader: watch::Receiver<bool>,
    /// The namespaces (the controller's one Namespace watch), for their teams.
    pub namespaces: NamespaceLabels,
    /// The namespace label whose value names a namespace's team (`--dashboard-team-label`).
    pub team_label: String,
    /// Recent Warning events per quota.
    pub warnings: Warnings,
    /// Poked by [`watch_warnings`] on each Warning event kept.
    pub warnings_changed: Changes,
}

impl Sources {
    /// The change signals of every source but leadership.
    fn changes(&self) -> Vec<watch::Receiver<u64>> {
        let mut all = vec![
            self.views.changes(),
            self.namespaces.changes(),
            self.warnings_changed.subscribe(),
        ];
        if let MemberSource::Measured(registry) = &self.members {
            all.push(registry.changes());
        }
        all
    }
}

/// Where the dashboard learns whether members are reachable.
#[derive(Clone)]
pub enum MemberSource {
    /// This replica measures them.
    Measured(MemberRegistry),
    /// This replica measures nothing (`--role=dashboard`): from the quotas' status.
    FromStatus,
}

/// Each member's reach as the quotas' status tells it, for a replica that measures none:
/// unreachable (with its error) when a MembersReachable=False condition names it, else
/// reachable when a quota shows what it runs, else connecting (listed, not measured yet).
pub fn reach_from_views<'a>(
    reports: impl IntoIterator<Item = &'a Quota>,
) -> BTreeMap<String, Reach> {
    let mut reach = BTreeMap::new();
    for r in reports {
        for c in &r.clusters {
            let seen = if c.observed.is_some() {
                Reach::Reachable
            } else {
                Reach::Connecting
            };
            let entry = reach.entry(c.name.clone()).or_insert(Reach::Connecting);
            if *entry == Reach::Connecting {
                *entry = seen;
            }
        }
        let down = r.conditions.iter().filter(|c| {
            c.type_ == karmada_quota_crds::quota::CONDITION_MEMBERS_REACHABLE && c.status == "False"
        });
        for c in down {
            for (name, error) in crate::desired::unreachable_members(&c.message) {
                reach.insert(name.to_owned(), Reach::Unreachable(error.to_owned()));
            }
        }
    }
    reach
}

/// The snapshot of `sources` at `now`.
pub fn snapshot(sources: &Sources, freshness: &mut Freshness, now: i64) -> Snapshot {
    let warnings = sources.warnings.read();
    let views = sources.views.read();
    let reach = match &sources.members {
        MemberSource::Measured(registry) => registry.reach(),
        MemberSource::FromStatus => reach_from_views(views.values()),
    };
    let quotas = views
        .values()
        .map(|r| {
            let denials = warnings
                .get(&(r.namespace.clone(), r.name.clone()))
                .map(|d| d.iter().cloned().collect())
                .unwrap_or_default();
            Quota {
                denials,
                ..r.clone()
            }
        })
        .collect();
    Snapshot {
        generated_at: now,
        leader: *sources.leader.borrow(),
        members: reach
            .iter()
            .map(|(name, reach)| freshness.member(name, reach, now))
            .collect(),
        quotas,
        teams: sources.namespaces.teams(&sources.team_label),
    }
}

/// Rebuild the snapshot when a source changed (at most once per [`MIN_GAP`]) and send it
/// when it differs from the last one sent, or every [`REFRESH_INTERVAL`] regardless;
/// until `stop`.
pub async fn feed(
    sources: Sources,
    tx: watch::Sender<Arc<Snapshot>>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut freshness = Freshness::default();
    let mut changes = sources.changes();
    let mut leader = sources.leader.clone();
    let mut leader_live = true;
    let mut last_sent: Option<tokio::time::Instant> = None;
    tokio::pin!(stop);
    loop {
        if let Some(at) = last_sent {
            tokio::select! {
                () = &mut stop => return,
                () = crate::changes::any_changed(&mut changes) => {}
                r = leader.changed(), if leader_live => leader_live = r.is_ok(),
                () = tokio::time::sleep_until(at + REFRESH_INTERVAL) => {}
            }
            // Let a burst settle into one rebuild.
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep_until(at + MIN_GAP) => {}
            }
        }
        let now = jiff::Timestamp::now().as_second();
        let next = snapshot(&sources, &mut freshness, now);
        let changed = {
            let current = tx.borrow();
            Snapshot {
                generated_at: now,
                ..current.as_ref().clone()
            } != next
        };
        let due = last_sent.is_none_or(|at| at.elapsed() >= REFRESH_INTERVAL);
        if changed || due {
            tx.send_replace(Arc::new(next));
            last_sent = Some(tokio::time::Instant::now());
        }
    }
}

/// The field selector of the Warning events on KarmadaQuotas.
pub const WARNING_EVENTS: &str = "involvedObject.kind=KarmadaQuota,type=Warning";

/// Keep the recent Warning events of every quota (what the webhook refused, drift,
/// unreachable members) in `warnings`.
pub async fn watch_warnings(api: Api<CoreEvent>, warnings: Warnings, changed: Changes) {
    let mut events = watcher(api, from_watch_cache().fields(WARNING_EVENTS))
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => {
                record_warning(&warnings, &ev);
                changed.poke();
            }
            Err(e) => tracing::warn!(error = %e, "event watch (dashboard) error; retrying"),
        }
    }
}

/// Add (or update, by uid) one event in its quota's list, newest first, bounded.
pub fn record_warning(warnings: &Warnings, ev: &CoreEvent) {
    let (Some(ns), Some(name)) = (
        ev.involved_object.namespace.clone(),
        ev.involved_object.name.clone(),
    ) else {
        return;
    };
    let time = ev
        .series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0))
        .or_else(|| ev.last_timestamp.as_ref().map(|t| t.0))
        .or_else(|| ev.event_time.as_ref().map(|t| t.0))
        .or_else(|| ev.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .map(|t| t.to_string())
        .unwrap_or_default();
    let count = ev
        .series
        .as_ref()
        .and_then(|s| s.count)
        .or(ev.count)
        .and_then(|c| u32::try_from(c).ok())
        .unwrap_or(1);
    let denial = Denial {
        time,
        message: format!(
            "{}: {}",
            ev.reason.as_deref().unwrap_or("Warning"),
            ev.message.as_deref().unwrap_or_default()
        ),
        count,
        uid: ev.metadata.uid.clone().unwrap_or_default(),
    };
    let mut map = warnings.write();
    let list = map.entry((ns, name)).or_default();
    list.retain(|d| d.uid != denial.uid || denial.uid.is_empty());
    list.push_front(denial);
    list.make_contiguous().sort_by(|a, b| b.time.cmp(&a.time));
    list.truncate(EVENTS_PER_QUOTA);
}

/// How often the dashboard's TLS files are checked for changes.
const TLS_RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The dashboard server over `sources`, fed until `stop`; with `access`, each request
/// must carry a token it accepts and sees only the namespaces it allows. Every snapshot
/// (and the current one every `history.1`) is recorded in the in-memory history
/// `history.0` the quota page's chart reads. It is served by
/// the runtime's hardened listener within `limits`, over HTTPS when `tls` names files
/// (reloaded when they change). A bind or TLS failure is logged: the controller keeps
/// running without its dashboard.
pub fn spawn(
    addr: std::net::SocketAddr,
    settings: Settings,
    access: Option<Access>,
    sources: Sources,
    listen: (Limits, Option<TlsFiles>),
    stop: impl std::future::Future<Output = ()> + Send + Sync + 'static,
    history: (karmada_quota_dashboard::history::Recent, Duration),
) {
    let stop = futures::FutureExt::shared(stop);
    let (limits, tls_files) = listen;
    let tls = match tls_files.map(ServerTls::load).transpose() {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!(error = %e, "dashboard not started; the controller continues without it");
            return;
        }
    };
    let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
    tokio::spawn(feed(sources, tx, stop.clone()));
    let (recent, step) = history;
    tokio::spawn(crate::history::sample(
        rx.clone(),
        recent.clone(),
        step,
        stop.clone(),
    ));
    let mut dashboard = match Dashboard::new(rx, settings) {
        Ok(d) => d.with_history(recent),
        Err(e) => {
            tracing::error!(error = %e, "dashboard off; the controller continues without it");
            return;
        }
    };
    tracing::info!(
        auth = if access.is_some() {
            "kubernetes"
        } else {
            "none"
        },
        "dashboard authentication"
    );
    if let Some(access) = access {
        dashboard = dashboard.with_access(access);
    }
    if let Some(tls) = &tls {
        tokio::spawn(tls.clone().reload_on_change(TLS_RELOAD_INTERVAL));
    }
    tokio::spawn(async move {
        let served = async {
            let tcp = listener::bind(addr, "dashboard").await?;
            let router = karmada_quota_dashboard::router(dashboard);
            let shutdown = stop.clone();
            listener::serve("dashboard", tcp, router, limits, tls, shutdown).await
        };
        if let Err(e) = served.await {
            tracing::error!(error = %e, "dashboard stopped; the controller continues without it");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rl;
    use karmada_quota_dashboard::model::{ClusterUsage, Condition};

    fn view() -> Quota {
        Quota {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[("pods", "10")]),
            used: rl(&[("pods", "3")]),
            clusters: vec![ClusterUsage {
                name: "m1".into(),
                placed: rl(&[("pods", "3")]),
                observed: Some(rl(&[("pods", "4")])),
                ..ClusterUsage::default()
            }],
            bindings: 2,
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Computed".into(),
                message: String::new(),
                since: "2026-01-01T00:00:00Z".into(),
            }],
            computed_at: 1_767_225_610,
            ..Quota::default()
        }
    }

    #[tokio::test]
    async fn the_feed_sends_a_snapshot_when_a_source_changes_and_not_on_a_timer() {
        let views = Views::default();
        let (namespaces, _writer) = NamespaceLabels::with_writer();
        let leader = watch::Sender::new(false);
        let registry = MemberRegistry::default();
        let sources = Sources {
            views: views.clone(),
            members: MemberSource::Measured(registry.clone()),
            leader: leader.subscribe(),
            namespaces,
            team_label: String::new(),
            warnings: Warnings::default(),
            warnings_changed: Changes::default(),
        };
        let (tx, mut rx) = watch::channel(Arc::new(Snapshot::default()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let feed = tokio::spawn(feed(sources, tx, async move {
            let _ = stop_rx.await;
        }));
        let next = |rx: &mut watch::Receiver<Arc<Snapshot>>| {
            let mut rx = rx.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(5), rx.changed())
                    .await
                    .expect("a snapshot within 5 s")
                    .unwrap();
                rx.borrow_and_update().clone()
            }
        };
        // The first snapshot at once.
        let first = next(&mut rx).await;
        assert!(first.quotas.is_empty());
        rx.borrow_and_update();
        // A reconcile publishes a view: pushed.
        views.publish(("team-a".into(), "q".into()), view());
        let s = next(&mut rx).await;
        assert_eq!(s.quotas.len(), 1);
        rx.borrow_and_update();
        // The same numbers computed again (a later computation time): nothing to send.
        let mut again = view();
        again.computed_at += 300;
        views.publish(("team-a".into(), "q".into()), again);
        assert!(
            tokio::time::timeout(Duration::from_millis(1500), rx.changed())
                .await
                .is_err(),
            "no snapshot without a change (the refresh is every {REFRESH_INTERVAL:?})"
        );
        // A member's reachability and leadership are pushed too.
        let epoch = registry.start("m9");
        let s = next(&mut rx).await;
        assert!(s.members.iter().any(|m| m.name == "m9"));
        rx.borrow_and_update();
        registry.set_reach("m9", epoch, Reach::Reachable);
        leader.send_replace(true);
        let s = next(&mut rx).await;
        assert!(s.leader || next(&mut rx).await.leader);
        let _ = stop_tx.send(());
        feed.await.unwrap();
    }

    #[test]
    fn the_snapshot_serves_each_view_as_it_is_with_its_recent_denials() {
        let views = Views::default();
        views.publish(("team-a".into(), "q".into()), view());
        let (namespaces, _writer) = NamespaceLabels::with_writer();
        let leader = watch::Sender::new(false);
        let sources = Sources {
            views,
            members: MemberSource::FromStatus,
            leader: leader.subscribe(),
            namespaces,
            team_label: String::new(),
            warnings: Warnings::default(),
            warnings_changed: Changes::default(),
        };
        let snap = snapshot(&sources, &mut Freshness::default(), 1_767_225_700);
        assert_eq!(snap.quotas, vec![view()]);
    }

    #[test]
    fn a_replica_that_measures_nothing_reads_members_from_the_quotas_status() {
        let mut down = view();
        down.clusters.push(ClusterUsage {
            name: "m2".into(),
            placed: rl(&[("pods", "1")]),
            ..ClusterUsage::default()
        });
        down.conditions.push(Condition {
            type_: "MembersReachable".into(),
            status: "False".into(),
            reason: "Unreachable".into(),
            message: "m2 unreachable: connection refused; m3 unreachable: timed out".into(),
            since: "2026-01-01T00:00:00Z".into(),
        });
        let mut fresh = view();
        fresh.clusters.push(ClusterUsage {
            name: "m4".into(),
            placed: rl(&[("pods", "1")]),
            ..ClusterUsage::default()
        });
        let reach = reach_from_views([&down, &fresh]);
        assert_eq!(reach["m1"], Reach::Reachable);
        assert_eq!(reach["m2"], Reach::Unreachable("connection refused".into()));
        // Named down by a condition, though no quota places anything there.
        assert_eq!(reach["m3"], Reach::Unreachable("timed out".into()));
        // Listed, never measured, never said to be down.
        assert_eq!(reach["m4"], Reach::Connecting);
        assert_eq!(reach.len(), 4);
    }

    #[test]
    fn members_go_stale_from_the_last_moment_they_were_live() {
        let mut f = Freshness::default();
        assert_eq!(f.member("m", &Reach::Reachable, 100).stale_since, None);
        let m = f.member("m", &Reach::Unreachable("refused".into()), 130);
        assert_eq!(m.stale_since, Some(100));
        assert_eq!(m.message.as_deref(), Some("refused"));
        assert_eq!(m.age(160), 60);
        // Never live: stale since first seen.
        assert_eq!(
            f.member("n", &Reach::Connecting, 140).stale_since,
            Some(140)
        );
        assert_eq!(
            f.member("n", &Reach::Connecting, 150).stale_since,
            Some(140)
        );
    }

    #[test]
    fn warnings_are_kept_per_quota_newest_first_and_updated_by_uid() {
        let warnings = Warnings::default();
        let ev = |uid: &str, time: &str, count: i32| CoreEvent {
            metadata: kube::api::ObjectMeta {
                uid: Some(uid.into()),
                ..Default::default()
            },
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                kind: Some("KarmadaQuota".into()),
                namespace: Some("team-a".into()),
                name: Some("q".into()),
                ..Default::default()
            },
            reason: Some("QuotaExceeded".into()),
            message: Some("requested pods=2".into()),
            type_: Some("Warning".into()),
            count: Some(count),
            last_timestamp: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                time.parse().unwrap(),
            )),
            ..Default::default()
        };
        record_warning(&warnings, &ev("1", "2026-01-01T00:00:00Z", 1));
        record_warning(&warnings, &ev("2", "2026-01-01T00:01:00Z", 1));
        record_warning(&warnings, &ev("1", "2026-01-01T00:02:00Z", 3));
        let map = warnings.read();
        let list = &map[&("team-a".to_owned(), "q".to_owned())];
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].count, 3);
        assert_eq!(list[0].message, "QuotaExceeded: requested pods=2");
        assert_eq!(list[1].time, "2026-01-01T00:01:00Z");
    }
}
