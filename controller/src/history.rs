//! The in-memory usage history behind the quota page's chart: records every quota of each
//! dashboard snapshot into a bounded window (`karmada_quota_billing::history::Store`) when
//! the snapshot changes and every `--history-step`, so the chart has points without a
//! Prometheus (and when it fails).
//!
//! ```text
//!  dashboard feed ── watch::Receiver<Arc<Snapshot>> ──┐ on change
//!  tick every --history-step ─────────────────────────┤
//!                                                     ▼
//!            dashboard::history::record ─► Store::record_all(now, every quota: hard, used,
//!                                           reserved, placed per member)
//!            (core: unchanged quotas once per step, deleted quotas dropped, bounded by
//!             --history-window, --history-max-quotas and the samples per quota)
//!                                                     ▼
//!            Recent (Arc<RwLock<Store>>) ──► the dashboard's /api/v1/…/history
//! ```
//!
//! The numbers are the snapshot's, i.e. what the controller computed and exports as
//! `kq_quota_*`: no arithmetic of its own here.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_dashboard::Snapshot;
use karmada_quota_dashboard::history::{Recent, record};
use tokio::sync::watch;

/// Records every snapshot `rx` sends, and the current one every `step`, until `stop`.
pub async fn sample(
    mut rx: watch::Receiver<Arc<Snapshot>>,
    recent: Recent,
    step: Duration,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut tick = tokio::time::interval(step.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            changed = rx.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
        let snapshot = rx.borrow_and_update().clone();
        // The feed starts from an empty snapshot: recording it would drop nothing but
        // would tell nothing either.
        if snapshot.generated_at == 0 {
            continue;
        }
        record(&recent, &snapshot, jiff::Timestamp::now().as_second());
    }
}

#[cfg(test)]
mod tests {
    use parking_lot::RwLock;

    use karmada_quota_billing::history::{Bounds, Store};
    use karmada_quota_dashboard::model::{ClusterUsage, Quota};

    use super::*;
    use crate::testutil::rl;

    fn snapshot(pods: &str, quotas: usize) -> Snapshot {
        Snapshot {
            generated_at: 1,
            quotas: (0..quotas)
                .map(|i| Quota {
                    namespace: format!("team-{i}"),
                    name: "q".into(),
                    hard: rl(&[("pods", "10"), ("requests.cpu", "10")]),
                    used: rl(&[("pods", pods)]),
                    clusters: vec![ClusterUsage {
                        name: "member1".into(),
                        placed: rl(&[("pods", pods)]),
                        ..ClusterUsage::default()
                    }],
                    ..Quota::default()
                })
                .collect(),
            ..Snapshot::default()
        }
    }

    fn recent(b: Bounds) -> Recent {
        Arc::new(RwLock::new(Store::new(b)))
    }

    #[tokio::test(start_paused = true)]
    async fn every_change_is_recorded_at_once_and_deleted_quotas_go() {
        let r = recent(Bounds::default());
        let (tx, rx) = watch::channel(Arc::new(Snapshot::default()));
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sample(rx, r.clone(), Duration::from_secs(15), async {
            let _ = stop_rx.await;
        }));
        for pods in ["1", "2", "3"] {
            tx.send_replace(Arc::new(snapshot(pods, 2)));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let chart = r.read().chart("team-0", "q", (0, i64::MAX / 2), 100, true);
        let pods = chart
            .unwrap()
            .resources
            .into_iter()
            .find(|l| l.resource == "pods")
            .unwrap();
        let last = pods.used.last().unwrap().1;
        assert_eq!(last, 3.0);
        assert_eq!(pods.clusters[0].used.last().unwrap().1, 3.0);
        tx.send_replace(Arc::new(snapshot("3", 1)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(r.read().quotas(), 1, "team-1/q was deleted");
        let _ = stop_tx.send(());
        task.await.unwrap();
    }

    /// Resident set size of this process, KiB (nextest runs each test in its own).
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    /// 500 quotas changing every second for ten windows: the memory held stays within
    /// the store's bound, and the process does not grow after the first window.
    #[test]
    fn churn_for_ten_windows_stays_within_the_bound_and_rss_stops_growing() {
        let b = Bounds {
            window: 120,
            step: 5,
            max_quotas: 500,
        };
        let r = recent(b);
        let snapshots: Vec<Snapshot> = (0..7).map(|i| snapshot(&i.to_string(), 600)).collect();
        let mut after_first = 0;
        for t in 0..1200_i64 {
            record(&r, &snapshots[usize::try_from(t % 7).unwrap()], t);
            if t == 120 {
                after_first = rss_kib();
            }
        }
        let store = r.read();
        assert_eq!(store.quotas(), 500);
        assert!(store.held_bytes() <= b.max_bytes());
        let grown = rss_kib().saturating_sub(after_first);
        eprintln!(
            "held {} KiB (bound {} KiB); RSS after one window {after_first} KiB, grown {grown} KiB over nine more",
            store.held_bytes() / 1024,
            b.max_bytes() / 1024
        );
        assert!(
            grown < 8 * 1024,
            "RSS grew {grown} KiB after the first window"
        );
    }
}
