//! A change signal: a source of the dashboard's snapshot (the reconcilers' views, the
//! members' reachability, the namespaces' labels, the quotas' Warning events) pokes its
//! own [`Changes`] when what it holds changed, and the dashboard's feed awaits any of
//! them ([`any_changed`]) instead of rebuilding and diffing a snapshot on a timer.

use std::sync::Arc;

use tokio::sync::watch;

/// One source's change signal (cheap to clone; every clone pokes the same receivers).
#[derive(Clone, Debug)]
pub struct Changes(Arc<watch::Sender<u64>>);

impl Default for Changes {
    fn default() -> Self {
        Self(Arc::new(watch::Sender::new(0)))
    }
}

impl Changes {
    /// Tell every subscriber that something changed.
    pub fn poke(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// How many pokes so far (wrapping): an equal number, nothing changed in between.
    pub fn count(&self) -> u64 {
        *self.0.borrow()
    }

    /// A receiver that sees every later poke.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// Resolves once any of `sources` was poked since it was last seen (a closed source
/// never resolves; none at all never resolves either).
pub async fn any_changed(sources: &mut [watch::Receiver<u64>]) {
    if sources.is_empty() {
        return std::future::pending().await;
    }
    let waits = sources.iter_mut().map(|rx| {
        Box::pin(async move {
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    });
    futures::future::select_all(waits).await;
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_poke_of_any_source_wakes_the_waiter_once() {
        let (a, b) = (Changes::default(), Changes::default());
        let mut rxs = vec![a.subscribe(), b.subscribe()];
        b.poke();
        tokio::time::timeout(Duration::from_secs(5), any_changed(&mut rxs))
            .await
            .expect("woken by b");
        // Seen: nothing new until the next poke.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), any_changed(&mut rxs))
                .await
                .is_err()
        );
        a.poke();
        tokio::time::timeout(Duration::from_secs(5), any_changed(&mut rxs))
            .await
            .expect("woken by a");
    }

    #[tokio::test]
    async fn a_closed_source_does_not_spin() {
        let rx = Changes::default().subscribe();
        let mut rxs = vec![rx];
        assert!(
            tokio::time::timeout(Duration::from_millis(50), any_changed(&mut rxs))
                .await
                .is_err()
        );
    }
}
