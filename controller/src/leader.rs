//! Leader election with a coordination.k8s.io/v1 Lease (kube 5 has none built in).
//!
//! ```text
//!  every renew interval (leader) / retry period (candidate):
//!    GET lease ── 404 ──► create {holder: me} ───────────────────────► leader
//!        │
//!        └─ decide(record, me, observed_at, now)
//!             Renew   (I hold it)             ─► replace renewTime (rv precondition) ─► leader
//!             Acquire (free, or not renewed
//!                      for leaseDuration)      ─► replace holder=me, transitions+1   ─► leader
//!             Wait    (someone else holds it)                                        ─► follower
//!  409 on any write: someone else wrote first ─► follower until the next round.
//!  A leader that cannot renew for (duration − renew interval) stops writing before anyone
//!  may take over. On shutdown the leader releases the Lease (holder cleared) for a fast
//!  hand-over.
//! ```
//!
//! Like client-go, expiry is judged by when *this* replica saw the record change (its own
//! monotonic clock), never by comparing another machine's `renewTime` with local time.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Error;

/// How the election runs.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity.
    pub identity: String,
    /// leaseDurationSeconds written to the Lease.
    pub duration: Duration,
    /// How often the leader renews.
    pub renew_interval: Duration,
}

impl LeaseSettings {
    /// How often a candidate retries (client-go's RetryPeriod: 2 s, never above the renew interval).
    pub fn retry_period(&self) -> Duration {
        self.renew_interval.min(Duration::from_secs(2))
    }

    /// How long a leader may go without a successful renewal before it stops writing.
    pub fn renew_deadline(&self) -> Duration {
        self.duration
            .saturating_sub(self.renew_interval)
            .max(self.renew_interval)
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }
}

/// What to do with the Lease as it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// I hold it: renew.
    Renew,
    /// It is free or expired: take it.
    Acquire,
    /// Someone else holds it and it has not expired.
    Wait,
}

/// The part of a Lease that tells whether it is alive; a change in any of it restarts the
/// expiry clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// holderIdentity (`None` or empty = free).
    pub holder: Option<String>,
    /// leaseDurationSeconds.
    pub duration_secs: i32,
    /// renewTime, as written.
    pub renew_time: Option<String>,
    /// leaseTransitions.
    pub transitions: i32,
}

impl Record {
    /// The record of a Lease.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.as_ref();
        Self {
            holder: spec
                .and_then(|s| s.holder_identity.clone())
                .filter(|h| !h.is_empty()),
            duration_secs: spec.and_then(|s| s.lease_duration_seconds).unwrap_or(0),
            renew_time: spec
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| t.0.to_string()),
            transitions: spec.and_then(|s| s.lease_transitions).unwrap_or(0),
        }
    }
}

/// Should `me` renew, acquire or wait, given the `record` first seen (in its current
/// form) at `observed_at`?
pub fn decide(record: &Record, me: &str, observed_at: Instant, now: Instant) -> Decision {
    match record.holder.as_deref() {
        Some(holder) if holder == me => Decision::Renew,
        None => Decision::Acquire,
        Some(_) => {
            let ttl = Duration::from_secs(u64::try_from(record.duration_secs.max(0)).unwrap_or(0));
            if now >= observed_at + ttl {
                Decision::Acquire
            } else {
                Decision::Wait
            }
        }
    }
}

/// Runs the election and publishes "am I the leader" on a watch channel.
pub struct Elector {
    api: Api<Lease>,
    settings: LeaseSettings,
    tx: watch::Sender<bool>,
    observed: Option<(Record, Instant)>,
    last_renew: Option<Instant>,
}

impl Elector {
    /// An elector and the receiver of its leadership state (false until elected).
    pub fn new(client: Client, settings: LeaseSettings) -> (Self, watch::Receiver<bool>) {
        let (tx, rx) = watch::channel(false);
        let api = Api::namespaced(client, &settings.namespace);
        (
            Self {
                api,
                settings,
                tx,
                observed: None,
                last_renew: None,
            },
            rx,
        )
    }

    /// Run until `shutdown` resolves; then release the Lease if held.
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) {
        tracing::info!(
            lease = %format!("{}/{}", self.settings.namespace, self.settings.name),
            identity = %self.settings.identity,
            "leader election started"
        );
        tokio::pin!(shutdown);
        loop {
            let now = Instant::now();
            match self.round(now).await {
                Ok(leader) => {
                    if leader {
                        self.last_renew = Some(now);
                    }
                    self.set(leader);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election round failed");
                    let expired = self
                        .last_renew
                        .is_none_or(|t| now.duration_since(t) >= self.settings.renew_deadline());
                    if expired {
                        self.set(false);
                    }
                }
            }
            let wait = if *self.tx.borrow() {
                self.settings.renew_interval
            } else {
                self.settings.retry_period()
            };
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        if *self.tx.borrow() {
            self.set(false);
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "could not release the leader Lease");
            } else {
                tracing::info!("leader Lease released");
            }
        }
    }

    fn set(&self, leader: bool) {
        let was = *self.tx.borrow();
        if was != leader {
            if leader {
                tracing::info!(identity = %self.settings.identity, "became leader: writing quota status");
            } else {
                tracing::info!(identity = %self.settings.identity, "not the leader: status writes stop");
            }
            self.tx.send_replace(leader);
        }
    }

    /// One round: returns whether this replica holds the Lease afterwards.
    async fn round(&mut self, now: Instant) -> Result<bool, Error> {
        let lease = match self.api.get_opt(&self.settings.name).await? {
            Some(l) => l,
            None => return self.create().await,
        };
        let record = Record::of(&lease);
        let observed_at = match &self.observed {
            Some((r, at)) if *r == record => *at,
            _ => {
                self.observed = Some((record.clone(), now));
                now
            }
        };
        match decide(&record, &self.settings.identity, observed_at, now) {
            Decision::Wait => Ok(false),
            Decision::Renew => self.write(lease, false).await,
            Decision::Acquire => {
                if let Some(h) = &record.holder {
                    tracing::info!(previous = %h, "leader Lease expired; taking over");
                }
                self.write(lease, true).await
            }
        }
    }

    async fn create(&mut self) -> Result<bool, Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.settings.name.clone()),
                namespace: Some(self.settings.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.settings.identity.clone()),
                lease_duration_seconds: Some(self.settings.duration_secs()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_already_exists() || s.is_conflict() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Replace the Lease (resourceVersion precondition from the read): renew, or acquire.
    async fn write(&mut self, mut lease: Lease, acquire: bool) -> Result<bool, Error> {
        let now = MicroTime(jiff::Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if acquire {
            let had_holder = spec
                .holder_identity
                .as_deref()
                .is_some_and(|h| !h.is_empty());
            spec.holder_identity = Some(self.settings.identity.clone());
            spec.acquire_time = Some(now.clone());
            if had_holder {
                spec.lease_transitions =
                    Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
            } else if spec.lease_transitions.is_none() {
                spec.lease_transitions = Some(0);
            }
        }
        spec.lease_duration_seconds = Some(self.settings.duration_secs());
        spec.renew_time = Some(now);
        match self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observed = Some((Record::of(&written), Instant::now()));
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Clear the holder so another replica takes over at its next retry.
    async fn release(&self) -> Result<(), Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: Option<&str>, secs: i32) -> Record {
        Record {
            holder: holder.map(str::to_owned),
            duration_secs: secs,
            renew_time: Some("2026-11-22T01:00:00Z".into()),
            transitions: 0,
        }
    }

    #[test]
    fn holder_renews_its_own_lease() {
        let t = Instant::now();
        assert_eq!(decide(&rec(Some("me"), 15), "me", t, t), Decision::Renew);
    }

    #[test]
    fn free_lease_is_acquired() {
        let t = Instant::now();
        assert_eq!(decide(&rec(None, 15), "me", t, t), Decision::Acquire);
        let released = Record::of(&Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(String::new()),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        });
        assert_eq!(decide(&released, "me", t, t), Decision::Acquire);
    }

    #[test]
    fn others_lease_is_respected_until_unchanged_for_its_duration() {
        let seen = Instant::now();
        let r = rec(Some("other"), 15);
        assert_eq!(
            decide(&r, "me", seen, seen + Duration::from_secs(14)),
            Decision::Wait
        );
        assert_eq!(
            decide(&r, "me", seen, seen + Duration::from_secs(15)),
            Decision::Acquire
        );
    }

    #[test]
    fn record_change_restarts_the_expiry_clock() {
        // Covered by Elector::round: a changed record gets a fresh observed_at. Here: two
        // records differing only in renewTime are different observations.
        let a = rec(Some("other"), 15);
        let mut b = a.clone();
        b.renew_time = Some("2026-11-22T01:00:05Z".into());
        assert_ne!(a, b);
    }

    #[test]
    fn renew_deadline_is_below_the_lease_duration() {
        let s = LeaseSettings {
            namespace: "karmada-system".into(),
            name: "l".into(),
            identity: "me".into(),
            duration: Duration::from_secs(15),
            renew_interval: Duration::from_secs(5),
        };
        assert_eq!(s.renew_deadline(), Duration::from_secs(10));
        assert_eq!(s.retry_period(), Duration::from_secs(2));
        assert_eq!(s.duration_secs(), 15);
    }
}
