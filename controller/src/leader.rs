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
//!  may take over: every round is bounded by that deadline (a hung GET or replace is
//!  abandoned), and so is the sleep between rounds. On shutdown the leader releases the
//!  Lease (holder cleared) for a fast hand-over.
//! ```
//!
//! Like client-go, expiry is judged by when *this* replica saw the record change (its own
//! monotonic clock), never by comparing another machine's `renewTime` with local time.
//!
//! A Lease that cannot be used at all — its namespace does not exist, or RBAC denies it —
//! is logged once as one error line saying what to do, and makes the replica not ready
//! ([`Elector::lease_ok`]) until a round succeeds again.
//!
//! Why not the `kube-lease-manager` crate (0.13, evaluated against kube 5): its
//! `watch()` channel reports only changes of the holder as last read. When renewals fail
//! (API server slow or unreachable) it logs, backs off and keeps publishing `true`, past
//! the moment the Lease expires and another replica may take it; and it judges expiry by
//! comparing the holder's `renewTime` with the local wall clock (a skew allowance, not a
//! bound). The property this controller needs is the opposite: a leader stops writing
//! status before its Lease can have expired, by its own monotonic clock, whatever the
//! API server does (`LeaseSettings::leader_until`, the round budget, and the `is_leader`
//! check before every status write). Its constructor also needs the Lease API at once
//! (no retry while the namespace is missing) and panics on a grace ≥ duration. So the
//! election stays here.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::fence::Fence;

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

    /// How long a leader may go without a successful renewal before it stops writing
    /// (never longer than the lease duration).
    pub fn renew_deadline(&self) -> Duration {
        self.duration
            .saturating_sub(self.renew_interval)
            .max(self.renew_interval)
            .min(self.duration)
    }

    /// Until when a replica whose last successful round *started* at `last_renew` may act
    /// as the leader. The round start is before the Lease write, and another replica's
    /// expiry clock starts only once it sees that write, so this is at least the renew
    /// interval before anyone else may take over.
    pub fn leader_until(&self, last_renew: Instant) -> Instant {
        last_renew + self.renew_deadline()
    }

    /// Whether a replica that last renewed at `last_renew` may still act as the leader at
    /// `now`.
    pub fn still_leader(&self, last_renew: Option<Instant>, now: Instant) -> bool {
        last_renew.is_some_and(|t| now < self.leader_until(t))
    }

    /// How long a round started at `now` may take: a leader's must end by its deadline
    /// (`leading_until`); a candidate's is bounded by the renew deadline so that a hung
    /// request cannot stall the election.
    pub fn round_budget(&self, leading_until: Option<Instant>, now: Instant) -> Duration {
        match leading_until {
            Some(until) => until.saturating_duration_since(now),
            None => self.renew_deadline(),
        }
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
    lease_ok: watch::Sender<bool>,
    /// Why the Lease cannot be used, while that lasts (logged once).
    blocked: Option<String>,
    observed: Option<(Record, Instant)>,
    last_renew: Option<Instant>,
    /// Moved each time this replica takes the Lease, before it says it leads.
    fence: Option<Arc<Fence>>,
}

/// Why a failed round means the Lease cannot be used at all (and what to do), as one
/// line; `None` for a passing failure (a timeout, a restarting API server).
pub fn lease_unusable(error: &Error, namespace: &str) -> Option<String> {
    let Error::Kube(kube::Error::Api(status)) = error else {
        return None;
    };
    match status.code {
        // A Lease in a missing namespace: GET says "not found" (handled as no Lease), the
        // create that follows says the namespace is not found.
        404 if status.message.contains("namespaces") => Some(format!(
            "leader election: the lease namespace \"{namespace}\" does not exist; create it \
             (kubectl create namespace {namespace}) or set --lease-namespace to an existing \
             one. Not ready, no status written, retrying."
        )),
        403 => Some(format!(
            "leader election: RBAC denies Leases in namespace \"{namespace}\" ({}); grant \
             get, create and update on coordination.k8s.io leases there. Not ready, no status \
             written, retrying.",
            status.message
        )),
        _ => None,
    }
}

/// A short description of a failed round (no response body dump).
fn describe(error: &Error) -> String {
    match error {
        Error::Kube(kube::Error::Api(s)) => format!("{} ({} {})", s.message, s.code, s.reason),
        e => e.to_string(),
    }
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
                lease_ok: watch::channel(false).0,
                blocked: None,
                observed: None,
                last_renew: None,
                fence: None,
            },
            rx,
        )
    }

    /// Move `fence` each time the Lease is taken, before leadership is published: no
    /// write of the new term plans from a binding list older than the term
    /// (`crate::fence`).
    #[must_use]
    pub fn with_fence(mut self, fence: Arc<Fence>) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Whether the Lease can be used: false until a round completes, and while its
    /// namespace is missing or RBAC denies it.
    pub fn lease_ok(&self) -> watch::Receiver<bool> {
        self.lease_ok.subscribe()
    }

    /// Record a round's outcome for [`Self::lease_ok`]; a blocking problem is logged once.
    fn round_outcome(&mut self, error: Option<&Error>) {
        let blocked = error.and_then(|e| lease_unusable(e, &self.settings.namespace));
        match (&self.blocked, &blocked) {
            (_, Some(why)) if self.blocked.as_ref() != Some(why) => tracing::error!("{why}"),
            (Some(_), None) if error.is_none() => {
                tracing::info!(namespace = %self.settings.namespace, "leader election: the Lease is usable now");
            }
            _ => {}
        }
        if let Some(e) = error.filter(|_| blocked.is_none()) {
            tracing::warn!(error = %describe(e), "leader election round failed");
        }
        if blocked.is_some() || error.is_none() {
            self.lease_ok.send_if_modified(|ok| {
                let was = *ok;
                *ok = blocked.is_none();
                was != *ok
            });
            self.blocked = blocked;
        }
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
            // Step down first if the deadline passed (e.g. while sleeping after a failure).
            if !self.settings.still_leader(self.last_renew, now) {
                self.set(false);
            }
            let ok = self.timed_round(now).await;
            if !ok && !self.settings.still_leader(self.last_renew, Instant::now()) {
                self.set(false);
            }
            let wait = self.wait_after(ok);
            tokio::select! {
                () = &mut shutdown => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        self.step_down().await;
    }

    /// One round within its time budget: whether it went through (this replica's
    /// leadership published as it stands).
    async fn timed_round(&mut self, now: Instant) -> bool {
        let leading_until = self.leading_until();
        let budget = self.settings.round_budget(leading_until, now);
        match tokio::time::timeout(budget, self.round(now)).await {
            Ok(Ok(leader)) => {
                self.round_outcome(None);
                if leader {
                    self.last_renew = Some(now);
                }
                // A (candidate's) round that ended past its own deadline is not enough.
                self.set(leader && self.settings.still_leader(self.last_renew, Instant::now()));
                true
            }
            Ok(Err(e)) => {
                self.round_outcome(Some(&e));
                false
            }
            Err(_) => {
                tracing::warn!(
                    timeout = ?budget,
                    "leader election round timed out; request abandoned"
                );
                false
            }
        }
    }

    /// How long to wait after a round (`ok`: it went through) before the next.
    fn wait_after(&self, ok: bool) -> Duration {
        let after = Instant::now();
        match self.leading_until() {
            // A leader sleeps at most until its deadline, so that it steps down on time.
            Some(until) => {
                let wait = if ok {
                    self.settings.renew_interval
                } else {
                    self.settings.retry_period()
                };
                wait.min(until.saturating_duration_since(after))
            }
            None => self.settings.retry_period(),
        }
    }

    /// On shutdown: stop leading and release the Lease, if held.
    async fn step_down(&mut self) {
        if *self.tx.borrow() {
            self.set(false);
            if let Err(e) = self.release().await {
                tracing::warn!(error = %e, "could not release the leader Lease");
            } else {
                tracing::info!("leader Lease released");
            }
        }
    }

    /// The deadline of the leadership this replica currently publishes, if it is the leader.
    fn leading_until(&self) -> Option<Instant> {
        if *self.tx.borrow() {
            self.last_renew.map(|t| self.settings.leader_until(t))
        } else {
            None
        }
    }

    fn set(&self, leader: bool) {
        let was = *self.tx.borrow();
        if was != leader {
            if leader {
                let generation = self.fence.as_ref().map(|f| f.took_lease());
                tracing::info!(identity = %self.settings.identity, ?generation, "became leader: writing quota status once the bindings are listed again");
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

    fn api_error(code: u16, reason: &str) -> Error {
        Error::Kube(kube::Error::Api(
            kube::core::Status::failure("namespaces \"karmada-system\" not found", reason)
                .with_code(code)
                .boxed(),
        ))
    }

    #[test]
    fn a_missing_namespace_or_denied_rbac_is_one_line_saying_what_to_do() {
        let missing = lease_unusable(&api_error(404, "NotFound"), "karmada-system").unwrap();
        assert!(
            missing.contains("\"karmada-system\" does not exist"),
            "{missing}"
        );
        assert!(
            missing.contains("kubectl create namespace karmada-system"),
            "{missing}"
        );
        assert!(!missing.contains('\n'));
        let denied = lease_unusable(&api_error(403, "Forbidden"), "karmada-system").unwrap();
        assert!(
            denied.contains("RBAC") && denied.contains("leases"),
            "{denied}"
        );
        assert_eq!(lease_unusable(&api_error(500, "InternalError"), "x"), None);
        let gone = Error::Kube(kube::Error::Api(
            kube::core::Status::failure("leases \"l\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        ));
        assert_eq!(lease_unusable(&gone, "x"), None);
        assert_eq!(lease_unusable(&Error::Admin("x".into()), "x"), None);
        assert!(!describe(&api_error(404, "NotFound")).contains("ErrorResponse"));
    }

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

    fn settings(duration: u64, renew_interval: u64) -> LeaseSettings {
        LeaseSettings {
            namespace: "karmada-system".into(),
            name: "l".into(),
            identity: "me".into(),
            duration: Duration::from_secs(duration),
            renew_interval: Duration::from_secs(renew_interval),
        }
    }

    #[test]
    fn renew_deadline_is_below_the_lease_duration() {
        let s = settings(15, 5);
        assert_eq!(s.renew_deadline(), Duration::from_secs(10));
        assert_eq!(s.retry_period(), Duration::from_secs(2));
        assert_eq!(s.duration_secs(), 15);
    }

    #[test]
    fn renew_deadline_never_exceeds_the_lease_duration() {
        assert_eq!(settings(15, 10).renew_deadline(), Duration::from_secs(10));
        assert_eq!(settings(15, 20).renew_deadline(), Duration::from_secs(15));
    }

    #[test]
    fn leader_steps_down_before_the_lease_can_expire() {
        let s = settings(15, 5);
        let renewed = Instant::now();
        let secs = |n| renewed + Duration::from_secs(n);
        assert!(!s.still_leader(None, renewed));
        assert!(s.still_leader(Some(renewed), renewed));
        assert!(s.still_leader(Some(renewed), secs(9)));
        // The deadline is the renew interval before the lease duration, whatever a round
        // is doing at that moment.
        assert_eq!(s.leader_until(renewed), secs(10));
        assert!(!s.still_leader(Some(renewed), secs(10)));
        assert!(!s.still_leader(Some(renewed), secs(15)));
    }

    #[test]
    fn a_leaders_round_cannot_outlive_its_deadline() {
        let s = settings(15, 5);
        let renewed = Instant::now();
        let until = s.leader_until(renewed);
        // Next round, one renew interval later: 5 s left of the 10 s deadline.
        let next = renewed + Duration::from_secs(5);
        assert_eq!(s.round_budget(Some(until), next), Duration::from_secs(5));
        assert!(next + s.round_budget(Some(until), next) <= renewed + s.duration);
        // Past the deadline: no time at all.
        let late = renewed + Duration::from_secs(12);
        assert_eq!(s.round_budget(Some(until), late), Duration::ZERO);
        // A candidate's round is bounded too (kube's own read timeout is ~295 s).
        assert_eq!(s.round_budget(None, late), Duration::from_secs(10));
    }
}
