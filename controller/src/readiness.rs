//! Readiness: `/readyz` follows the watches' own synced state and the Lease as they
//! change (no poll).

use karmada_quota_shell::Readiness;
use tokio::sync::watch;

/// `/readyz` follows this: ready while every watch has listed once and the Lease can be
/// used (a missing lease namespace or denied RBAC makes the replica not ready until fixed).
pub(crate) async fn keep_readiness(
    mut synced: watch::Receiver<bool>,
    mut lease_ok: watch::Receiver<bool>,
    ready: Readiness,
) {
    // A sender gone (a role without a Lease) keeps its last value for good.
    let (mut synced_live, mut lease_live) = (true, true);
    loop {
        let now = *synced.borrow_and_update() && *lease_ok.borrow_and_update();
        if now != ready.is_ready() {
            if now {
                tracing::info!("caches synced and Lease usable; ready");
                ready.set_ready();
            } else {
                ready.set_not_ready();
            }
        }
        tokio::select! {
            r = synced.changed(), if synced_live => synced_live = r.is_ok(),
            r = lease_ok.changed(), if lease_live => lease_live = r.is_ok(),
            else => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kube::runtime::watcher;

    use super::*;
    use crate::index::Index;

    /// Waits (a functional bound, not a timing assertion) until `ready` is `want`.
    async fn until(ready: &Readiness, want: bool) {
        tokio::time::timeout(Duration::from_secs(5), async {
            while ready.is_ready() != want {
                tokio::task::yield_now().await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("readiness never became {want}"));
    }

    #[tokio::test]
    async fn readiness_follows_the_watches_and_the_lease_as_they_change() {
        let mut index = Index::new(60);
        let lease = watch::Sender::new(false);
        let ready = Readiness::default();
        tokio::spawn(keep_readiness(
            index.synced_changes(),
            lease.subscribe(),
            ready.clone(),
        ));
        index.quotas_listed();
        index.skip_clusters();
        lease.send_replace(true);
        tokio::task::yield_now().await;
        // The bindings have not listed yet.
        assert!(!ready.is_ready());
        let _ = index.apply_binding_event(&watcher::Event::Init, None, 0);
        let _ = index.apply_binding_event(&watcher::Event::InitDone, None, 0);
        assert!(index.synced());
        until(&ready, true).await;
        // The Lease becomes unusable (e.g. its namespace deleted): not ready, then back.
        lease.send_replace(false);
        until(&ready, false).await;
        lease.send_replace(true);
        until(&ready, true).await;
    }

    #[tokio::test]
    async fn a_role_without_a_lease_is_ready_once_the_watches_listed() {
        let mut index = Index::new(60);
        index.skip_clusters();
        let ready = Readiness::default();
        // As --role=dashboard: a Lease value whose sender is gone at once.
        tokio::spawn(keep_readiness(
            index.synced_changes(),
            watch::channel(true).1,
            ready.clone(),
        ));
        index.quotas_listed();
        let _ = index.apply_binding_event(&watcher::Event::Init, None, 0);
        let _ = index.apply_binding_event(&watcher::Event::InitDone, None, 0);
        until(&ready, true).await;
    }
}
