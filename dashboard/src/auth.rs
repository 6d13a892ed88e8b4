//! Who may see which quotas (`--dashboard-auth=kubernetes`): a bearer token is reviewed
//! by the API server (TokenReview), and the reviewed user sees only the namespaces where a
//! SubjectAccessReview allows `list karmadaquotas.quota.karmada.io`. Both answers are
//! cached briefly, so page loads and live streams do not flood the API server.
//!
//! ```text
//!  token ─► Access::user ── accepted (TTL) / refused (short TTL) caches, bounded
//!            └ miss ─► a token accepted before, a live session's or stream's (known_user)
//!                      ─► Reviewer::authenticate (TokenReview)
//!                    └► a token never seen ─► the bucket of new-token reviews
//!                        (--dashboard-new-token-reviews-per-second) ─► TokenReview, or 503
//!  user + snapshot ─► Access::restrict
//!     may_list(user, every namespace)? ── yes ─► the whole snapshot
//!     else per namespace of a quota: may_list(user, ns) (cached) ─► Snapshot::restricted
//! ```
//!
//! The [`Reviewer`] is a trait so the filtering is tested without a cluster; the
//! controller implements it with the Kubernetes API. A review that fails (API server
//! unreachable) is never cached: an unreviewable token is refused with 503, an
//! unreviewable namespace is hidden (fail closed).
//!
//! Tokens nobody presented before cost the API server a TokenReview each: they are
//! reviewed at most at the rate of [`CachePolicy::new_tokens`] over all requests (past
//! it, 503 until a token is back), and a refused token is remembered for
//! [`CachePolicy::refused_ttl`] in a cache of its own (a flood of refused tokens cannot
//! push the accepted ones out). Tokens accepted before and the tokens of live sessions
//! are re-reviewed whatever that rate: a flood of random tokens starves no one logged in.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::Hash;

use lru::LruCache;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;

use crate::model::Snapshot;
use crate::rate::{Bucket, Rate};

/// The API group of KarmadaQuota.
pub const QUOTA_GROUP: &str = "quota.karmada.io";
/// The resource a viewer must be allowed to `list` in a namespace to see its quotas.
pub const QUOTA_RESOURCE: &str = "karmadaquotas";
/// The verb checked.
pub const QUOTA_VERB: &str = "list";

/// How long a review is trusted by default.
pub const DEFAULT_CACHE_TTL: Duration = Duration::from_secs(30);
/// How long a refused token is remembered (short: a token may become valid).
pub const DEFAULT_REFUSED_TTL: Duration = Duration::from_secs(5);
/// At most this many cached answers per kind (accepted tokens, refused tokens, access
/// decisions).
pub const DEFAULT_CACHE_ENTRIES: usize = 4096;
/// TokenReviews of tokens never seen before, per second (and at once).
pub const DEFAULT_NEW_TOKEN_REVIEWS_PER_SECOND: u32 = 20;
/// The error of a new token past [`CachePolicy::new_tokens`].
pub const NEW_TOKENS_THROTTLED: &str = "too many new tokens to review right now \
(--dashboard-new-token-reviews-per-second); try again in a few seconds";

/// A user as a TokenReview reports it: what a SubjectAccessReview is asked about.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct User {
    /// `status.user.username`.
    pub name: String,
    /// `status.user.uid`.
    pub uid: String,
    /// `status.user.groups`.
    pub groups: Vec<String>,
    /// `status.user.extra`.
    pub extra: BTreeMap<String, Vec<String>>,
}

/// A review the API server could not answer.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ReviewError(pub String);

/// A review's answer.
pub type Review<'a, T> = BoxFuture<'a, Result<T, ReviewError>>;

/// Asks the API server who a token is and what they may do.
pub trait Reviewer: Send + Sync {
    /// TokenReview: the user, or `None` when the token is not accepted.
    fn authenticate<'a>(&'a self, token: &'a str) -> Review<'a, Option<User>>;

    /// SubjectAccessReview: may `user` list KarmadaQuotas in `namespace` (`None`: in
    /// every namespace, i.e. cluster-wide)?
    fn may_list<'a>(&'a self, user: &'a User, namespace: Option<&'a str>) -> Review<'a, bool>;
}

/// How long answers are kept.
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// An accepted token and every access decision.
    pub ttl: Duration,
    /// A refused token.
    pub refused_ttl: Duration,
    /// Entries per cache; when full, expired entries go, then everything.
    pub max_entries: usize,
    /// TokenReviews of tokens neither cached, nor accepted before, nor a live session's:
    /// at most this rate over all requests.
    pub new_tokens: Rate,
}

impl Default for CachePolicy {
    fn default() -> Self {
        Self {
            ttl: DEFAULT_CACHE_TTL,
            refused_ttl: DEFAULT_REFUSED_TTL,
            max_entries: DEFAULT_CACHE_ENTRIES,
            new_tokens: Rate::per_second(DEFAULT_NEW_TOKEN_REVIEWS_PER_SECOND),
        }
    }
}

/// A bounded map whose entries expire. Full, it forgets its least recently used entry,
/// never all of them: a flood of new keys cannot empty it of the answers others use.
#[derive(Debug)]
struct Cache<K: Eq + Hash, V> {
    entries: Mutex<LruCache<K, (Instant, V)>>,
    max: usize,
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn new(max: usize) -> Self {
        Self {
            entries: Mutex::new(LruCache::unbounded()),
            max: max.max(1),
        }
    }

    fn get(&self, key: &K) -> Option<V> {
        let mut map = self.entries.lock();
        map.get(key)
            .filter(|(until, _)| Instant::now() < *until)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, key: K, value: V, ttl: Duration) {
        let now = Instant::now();
        let mut map = self.entries.lock();
        if !map.contains(&key) {
            while map.len() >= self.max {
                map.pop_lru();
            }
        }
        map.put(key, (now + ttl, value));
    }

    /// Whether `key` has an entry, expired or not.
    fn holds(&self, key: &K) -> bool {
        let map = self.entries.lock();
        map.contains(key)
    }

    fn len(&self) -> usize {
        self.entries.lock().len()
    }
}

/// The reviewer with its caches: what every authenticated route asks.
pub struct Access {
    reviewer: Arc<dyn Reviewer>,
    policy: CachePolicy,
    /// Accepted tokens (an expired entry still says the token was accepted once).
    tokens: Cache<String, Arc<User>>,
    /// Refused tokens, briefly.
    refused: Cache<String, ()>,
    decisions: Cache<(Arc<User>, Option<String>), bool>,
    /// Reviews of tokens never seen.
    new_tokens: Bucket,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Access {
    /// Reviews through `reviewer`, cached as `policy` says.
    pub fn new(reviewer: Arc<dyn Reviewer>, policy: CachePolicy) -> Self {
        Self {
            reviewer,
            policy,
            tokens: Cache::new(policy.max_entries),
            refused: Cache::new(policy.max_entries),
            decisions: Cache::new(policy.max_entries),
            new_tokens: Bucket::new(policy.new_tokens),
        }
    }

    /// Who `token` (presented by a request: a bearer header, the login form) is: `Ok(None)`
    /// when the API server does not accept it; an error when it cannot be reviewed, or
    /// when it was never seen and the rate of new-token reviews is spent.
    pub async fn user(&self, token: &str) -> Result<Option<Arc<User>>, ReviewError> {
        self.review(token, false).await
    }

    /// Who a token accepted before is (a live session's, an open stream's): re-reviewed
    /// when its answer expired, whatever the rate of new-token reviews.
    pub async fn known_user(&self, token: &str) -> Result<Option<Arc<User>>, ReviewError> {
        self.review(token, true).await
    }

    async fn review(&self, token: &str, known: bool) -> Result<Option<Arc<User>>, ReviewError> {
        let key = token.to_owned();
        if let Some(user) = self.tokens.get(&key) {
            return Ok(Some(user));
        }
        if self.refused.get(&key).is_some() {
            return Ok(None);
        }
        if !known && !self.tokens.holds(&key) && !self.new_tokens.take() {
            return Err(ReviewError(NEW_TOKENS_THROTTLED.to_owned()));
        }
        let user = self.reviewer.authenticate(token).await?.map(Arc::new);
        match &user {
            Some(u) => self.tokens.put(key, u.clone(), self.policy.ttl),
            None => self.refused.put(key, (), self.policy.refused_ttl),
        }
        Ok(user)
    }

    /// Whether `user` may list quotas in `namespace` (`None`: everywhere). A failed review
    /// is a "no" that is not cached.
    pub async fn may_list(&self, user: &Arc<User>, namespace: Option<&str>) -> bool {
        let key = (user.clone(), namespace.map(str::to_owned));
        if let Some(known) = self.decisions.get(&key) {
            return known;
        }
        match self.reviewer.may_list(user, namespace).await {
            Ok(allowed) => {
                self.decisions.put(key, allowed, self.policy.ttl);
                allowed
            }
            Err(e) => {
                tracing::warn!(user = %user.name, namespace = namespace.unwrap_or("(all)"), error = %e, "dashboard: SubjectAccessReview failed; the namespace stays hidden");
                false
            }
        }
    }

    /// The part of `s` that `user` may see: every quota when they may list KarmadaQuotas
    /// cluster-wide, else those of the namespaces where they may.
    pub async fn restrict(&self, s: &Snapshot, user: &Arc<User>) -> Snapshot {
        if self.may_list(user, None).await {
            return s.clone();
        }
        // The quotas' namespaces, and those the cluster quotas select (a viewer of one of
        // them sees its share of the cluster quota).
        let namespaces: BTreeSet<&str> = s
            .quotas
            .iter()
            .flat_map(|q| {
                std::iter::once(q.namespace.as_str()).chain(q.namespaces.iter().map(String::as_str))
            })
            .filter(|ns| !ns.is_empty())
            .collect();
        let answers = futures::future::join_all(
            namespaces
                .iter()
                .map(|ns| async move { (*ns, self.may_list(user, Some(*ns)).await) }),
        )
        .await;
        let allowed: BTreeSet<&str> = answers
            .into_iter()
            .filter_map(|(ns, ok)| ok.then_some(ns))
            .collect();
        s.restricted(|ns| allowed.contains(ns))
    }

    /// Cached answers (accepted and refused tokens, decisions), for tests and debugging.
    pub fn cached(&self) -> (usize, usize) {
        (self.tokens.len() + self.refused.len(), self.decisions.len())
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A reviewer that answers from tables and counts the calls.

    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::{Review, ReviewError, Reviewer, User};

    /// token → user; user → namespaces they may list (`*`: every namespace).
    #[derive(Default)]
    pub struct FakeReviewer {
        pub tokens: BTreeMap<String, String>,
        pub grants: BTreeMap<String, BTreeSet<String>>,
        pub down: bool,
        pub token_reviews: AtomicUsize,
        pub access_reviews: AtomicUsize,
    }

    impl FakeReviewer {
        /// `team-a` (token `ta`) may list in `ml-train`; `team-b` (`tb`) in `web`;
        /// `admin` (`adm`) everywhere.
        pub fn teams() -> Self {
            let mut f = FakeReviewer::default();
            for (token, user, ns) in [
                ("ta", "team-a", "ml-train"),
                ("tb", "team-b", "web"),
                ("adm", "admin", "*"),
            ] {
                f.tokens.insert(token.into(), user.into());
                f.grants.entry(user.into()).or_default().insert(ns.into());
            }
            f
        }

        pub fn calls(&self) -> (usize, usize) {
            (
                self.token_reviews.load(Ordering::SeqCst),
                self.access_reviews.load(Ordering::SeqCst),
            )
        }
    }

    impl Reviewer for FakeReviewer {
        fn authenticate<'a>(&'a self, token: &'a str) -> Review<'a, Option<User>> {
            self.token_reviews.fetch_add(1, Ordering::SeqCst);
            let answer = if self.down {
                Err(ReviewError("connection refused".into()))
            } else {
                Ok(self.tokens.get(token).map(|name| User {
                    name: name.clone(),
                    uid: format!("uid-{name}"),
                    groups: vec!["system:authenticated".into()],
                    ..User::default()
                }))
            };
            Box::pin(async move { answer })
        }

        fn may_list<'a>(&'a self, user: &'a User, namespace: Option<&'a str>) -> Review<'a, bool> {
            self.access_reviews.fetch_add(1, Ordering::SeqCst);
            let grants = self.grants.get(&user.name);
            let allowed = grants
                .is_some_and(|g| g.contains("*") || namespace.is_some_and(|ns| g.contains(ns)));
            let answer = if self.down {
                Err(ReviewError("connection refused".into()))
            } else {
                Ok(allowed)
            };
            Box::pin(async move { answer })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeReviewer;
    use super::*;
    use crate::tests::snapshot;

    fn access(f: FakeReviewer, policy: CachePolicy) -> (Arc<FakeReviewer>, Access) {
        let f = Arc::new(f);
        (f.clone(), Access::new(f, policy))
    }

    fn namespaces(s: &Snapshot) -> Vec<&str> {
        s.quotas.iter().map(|q| q.namespace.as_str()).collect()
    }

    #[tokio::test]
    async fn a_viewer_sees_its_share_of_the_cluster_quota_over_its_namespace_and_nothing_else() {
        use crate::model::{Line, Quota, Reservation, Waiting};
        let waiting = |position, namespace: &str, name: &str| Waiting {
            position,
            namespace: namespace.into(),
            name: name.into(),
            ..Waiting::default()
        };
        use karmada_quota_core::ResourceList;
        let list = |cpu: &str| ResourceList::parse_map([("requests.cpu", cpu)]).unwrap();
        let mut s = snapshot();
        s.quotas.push(Quota {
            name: "business".into(),
            hard: list("100"),
            used: list("30"),
            namespaces: vec!["ml-train".into(), "web".into()],
            shares: [("ml-train".into(), list("10")), ("web".into(), list("20"))].into(),
            reservations: vec![Reservation {
                binding: "web-frontend".into(),
                ..Reservation::default()
            }],
            line: Some(Line {
                queueing: true,
                order: "StrictFIFO".into(),
                total: 3,
                waiting: vec![
                    waiting(1, "web", "web-batch"),
                    waiting(2, "ml-train", "train-b"),
                    waiting(3, "web", "web-cron"),
                ],
            }),
            ..Quota::default()
        });
        let (_, a) = access(FakeReviewer::teams(), CachePolicy::default());
        let team_a = a.user("ta").await.unwrap().unwrap();
        let seen = a.restrict(&s, &team_a).await;
        let business = seen.quotas.iter().find(|q| q.name == "business").unwrap();
        // Limits and totals, and team A's share only: not web's, not web's binding names.
        assert_eq!(
            (business.hard.clone(), business.used.clone()),
            (list("100"), list("30"))
        );
        assert_eq!(business.namespaces, ["ml-train"]);
        assert_eq!(business.shares.keys().collect::<Vec<_>>(), ["ml-train"]);
        assert!(business.reservations.is_empty() && business.top_bindings.is_empty());
        // Its own waiting binding at its place in the whole line, and how many wait in all.
        let line = business.line.as_ref().unwrap();
        assert_eq!(line.total, 3);
        assert_eq!(
            line.waiting
                .iter()
                .map(|w| (w.position, w.name.as_str()))
                .collect::<Vec<_>>(),
            [(2, "train-b")]
        );
        let json = serde_json::to_string(&seen).unwrap();
        assert!(
            !json.contains("web-frontend")
                && !json.contains("web-batch")
                && !json.contains("web-cron")
                && !json.contains("\"web\""),
            "{json}"
        );
        // Nobody's namespace: nothing of it.
        let mut f = FakeReviewer::teams();
        f.grants.clear();
        let (_, none) = access(f, CachePolicy::default());
        let nobody = none.user("ta").await.unwrap().unwrap();
        assert!(none.restrict(&s, &nobody).await.quotas.is_empty());
        // The cluster-wide viewer sees it whole.
        let admin = a.user("adm").await.unwrap().unwrap();
        let whole = a.restrict(&s, &admin).await;
        assert_eq!(
            whole
                .quotas
                .iter()
                .find(|q| q.name == "business")
                .unwrap()
                .shares
                .len(),
            2
        );
    }

    #[tokio::test]
    async fn each_user_sees_only_the_namespaces_they_may_list() {
        let (_, a) = access(FakeReviewer::teams(), CachePolicy::default());
        let s = snapshot();
        let team_a = a.user("ta").await.unwrap().unwrap();
        let seen = a.restrict(&s, &team_a).await;
        assert_eq!(namespaces(&seen), ["ml-train"]);
        assert_eq!(seen.teams.keys().collect::<Vec<_>>(), ["ml-train"]);
        let team_b = a.user("tb").await.unwrap().unwrap();
        assert_eq!(namespaces(&a.restrict(&s, &team_b).await), ["web"]);
        let admin = a.user("adm").await.unwrap().unwrap();
        assert_eq!(a.restrict(&s, &admin).await, s);
        assert!(a.user("nope").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn answers_are_cached_until_they_expire() {
        let (f, a) = access(FakeReviewer::teams(), CachePolicy::default());
        let s = snapshot();
        for _ in 0..5 {
            let u = a.user("ta").await.unwrap().unwrap();
            a.restrict(&s, &u).await;
        }
        // One TokenReview; one cluster-wide and one per namespace (3) SubjectAccessReview.
        assert_eq!(f.calls(), (1, 4));

        let (f, a) = access(
            FakeReviewer::teams(),
            CachePolicy {
                ttl: Duration::ZERO,
                refused_ttl: Duration::ZERO,
                ..CachePolicy::default()
            },
        );
        for _ in 0..2 {
            let u = a.user("ta").await.unwrap().unwrap();
            a.restrict(&s, &u).await;
        }
        assert_eq!(f.calls(), (2, 8), "expired answers are asked again");
    }

    #[tokio::test]
    async fn the_caches_stay_bounded() {
        let mut f = FakeReviewer::teams();
        for i in 0..50 {
            f.tokens.insert(format!("t{i}"), format!("u{i}"));
        }
        let (_, a) = access(
            f,
            CachePolicy {
                max_entries: 8,
                new_tokens: Rate::per_second(1_000),
                ..CachePolicy::default()
            },
        );
        let s = snapshot();
        for i in 0..50 {
            let u = a.user(&format!("t{i}")).await.unwrap().unwrap();
            assert!(a.restrict(&s, &u).await.quotas.is_empty());
            let (tokens, decisions) = a.cached();
            assert!(tokens <= 8 && decisions <= 8, "{tokens} {decisions}");
        }
    }

    /// A full cache forgets its least recently used answer, never all of them: a token in
    /// use keeps its answer while new tokens pass through.
    #[tokio::test]
    async fn a_full_cache_forgets_the_least_recently_used_answer_only() {
        let mut f = FakeReviewer::teams();
        for i in 0..50 {
            f.tokens.insert(format!("t{i}"), format!("u{i}"));
        }
        let (f, a) = access(
            f,
            CachePolicy {
                max_entries: 8,
                new_tokens: Rate::per_second(1_000),
                ..CachePolicy::default()
            },
        );
        for i in 0..50 {
            a.user("ta").await.unwrap().unwrap();
            a.user(&format!("t{i}")).await.unwrap().unwrap();
        }
        let (reviews, _) = f.calls();
        assert_eq!(reviews, 51, "ta reviewed once, each new token once");
        assert!(a.user("t49").await.unwrap().is_some());
        assert_eq!(f.calls().0, 51, "the newest answers stay");
        assert!(a.user("t0").await.unwrap().is_some());
        assert_eq!(f.calls().0, 52, "the oldest went");
    }

    /// 2,000 random bearer tokens cost at most the rate's TokenReviews, not 2,000; each
    /// is asked once and then remembered as refused (in a bounded cache); meanwhile a
    /// live session's token and a token accepted before are still reviewed.
    #[tokio::test]
    async fn random_tokens_cost_a_bounded_number_of_token_reviews() {
        let (f, a) = access(
            FakeReviewer::teams(),
            CachePolicy {
                ttl: Duration::ZERO,
                max_entries: 256,
                // A burst of 20, then one every 1000 s: the bound holds however slow the
                // machine runs the test.
                new_tokens: Rate {
                    per_second: 0.001,
                    burst: 20,
                },
                ..CachePolicy::default()
            },
        );
        // "tb" was accepted once (its answer expires at once: ttl zero).
        assert!(a.user("tb").await.unwrap().is_some());
        // A refused token asked again is answered from the cache.
        for _ in 0..100 {
            assert!(a.user("wrong").await.unwrap().is_none());
        }
        assert_eq!(f.calls().0, 2, "refused answers are remembered");
        let started = Instant::now();
        let mut throttled = 0;
        for i in 0..2_000 {
            match a.user(&format!("random-{i:016x}")).await {
                Ok(None) => {}
                Err(e) => {
                    assert_eq!(e.0, NEW_TOKENS_THROTTLED);
                    throttled += 1;
                }
                Ok(Some(u)) => panic!("accepted {u:?}"),
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        let reviews = f.calls().0 - 2;
        let bound = 20 + (elapsed * 0.001).ceil() as usize;
        assert!(
            reviews <= bound,
            "{reviews} TokenReviews in {elapsed:.2} s, bound {bound}"
        );
        assert_eq!(reviews + throttled, 2_000);
        assert!(a.cached().0 <= 256 + 1, "{:?}", a.cached());
        let before = f.calls().0;
        // The rate is spent, yet the logged-in are reviewed.
        for _ in 0..50 {
            assert_eq!(a.known_user("ta").await.unwrap().unwrap().name, "team-a");
            assert_eq!(a.user("tb").await.unwrap().unwrap().name, "team-b");
        }
        assert_eq!(
            f.calls().0,
            before + 100,
            "every expired answer asked again"
        );
        assert!(
            a.user("never-seen").await.is_err(),
            "the rate is spent for new tokens"
        );
    }

    #[tokio::test]
    async fn a_failed_review_is_an_error_for_tokens_and_hides_namespaces() {
        let (f, a) = access(
            FakeReviewer {
                down: true,
                ..FakeReviewer::teams()
            },
            CachePolicy::default(),
        );
        assert!(a.user("ta").await.is_err());
        let u = Arc::new(User {
            name: "team-a".into(),
            ..User::default()
        });
        assert!(a.restrict(&snapshot(), &u).await.quotas.is_empty());
        assert!(a.restrict(&snapshot(), &u).await.quotas.is_empty());
        assert_eq!(a.cached(), (0, 0), "failures are not cached");
        assert_eq!(f.calls().1, 8, "asked again every time");
    }
}
