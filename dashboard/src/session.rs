//! Login sessions of `--dashboard-auth=kubernetes`: the browser's cookie holds an opaque
//! random id (32 bytes from the operating system's CSPRNG, hex), never the bearer token;
//! the id maps, in this process only, to the reviewed user and the token it was
//! reviewed from (re-reviewed through [`Access`](crate::Access)'s cache on every request,
//! so a revoked token ends its session within the cache TTL).
//!
//! ```text
//!  POST /login (token accepted) ─► Sessions::create(user, token) ─► id ─► Set-Cookie kq_session=id
//!  any request with kq_session=id ─► Sessions::get(id)
//!      unknown / idle > idle_timeout / older than max_age ─► None (removed) ─► the login form
//!  POST /logout ─► Sessions::remove(id)
//! ```
//!
//! The store is bounded: at `max_sessions` the expired sessions go first, then the
//! oldest; one user holds at most `max_sessions_per_user` (its own oldest goes) and logs
//! in at most `logins_per_user_per_minute` times a minute (a token bucket per user name:
//! past it the login is refused with 429 and no session of anyone ends). One client
//! address tries at most `logins_per_peer_per_minute` logins a minute, whatever the
//! tokens and users (a bucket per IPv4 address or IPv6 /64, [`peer_key`], checked before
//! the token is reviewed: one peer cycling through many users' tokens is refused 429).
//! Both bucket maps are bounded by `max_sessions` keys ([`Buckets`]: never cleared). Sessions live in one replica's memory: with several replicas behind one
//! Service, the Service needs client affinity (`sessionAffinity: ClientIP`, or the
//! Ingress' cookie affinity), else a login on one replica is unknown to the others.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use ring::rand::{SecureRandom, SystemRandom};

use crate::auth::User;
use crate::rate::{Buckets, Rate, peer_key};

/// The cookie that carries the session id.
pub const SESSION_COOKIE: &str = "kq_session";
/// Random bytes in a session id (hex-encoded in the cookie: 64 characters).
pub const ID_BYTES: usize = 32;

/// How many sessions, and how long each lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionPolicy {
    /// At most this many sessions (the oldest goes when a new one would exceed it).
    pub max_sessions: usize,
    /// At most this many sessions of one user (by name): a new login past it ends that
    /// user's oldest session, never another user's. One token logging in again and again
    /// cannot evict everyone else's sessions from the store.
    pub max_sessions_per_user: usize,
    /// A session unused for this long ends.
    pub idle_timeout: Duration,
    /// A session ends this long after the login, used or not (the cookie's Max-Age).
    pub max_age: Duration,
    /// Logins of one user (by name) a minute, all of them at once at most: one token
    /// logging in again and again is refused (429) past it, before its login ends any
    /// session.
    pub logins_per_user_per_minute: u32,
    /// Login attempts from one client address (IPv4, or IPv6 /64) a minute, all of them
    /// at once at most, counted before the token is reviewed; 0: not limited (a proxy in
    /// front makes every login come from its address).
    pub logins_per_peer_per_minute: u32,
}

/// Default cap on sessions.
pub const DEFAULT_MAX_SESSIONS: usize = 10_000;
/// Default cap on one user's sessions (a person with a few browsers and devices).
pub const DEFAULT_MAX_SESSIONS_PER_USER: usize = 16;
/// Default idle timeout.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// Default absolute lifetime.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(8 * 60 * 60);
/// Default logins of one user a minute (a person logs in a few times a day).
pub const DEFAULT_LOGINS_PER_USER_PER_MINUTE: u32 = 10;
/// Default login attempts of one client address a minute (a few people behind one NAT).
pub const DEFAULT_LOGINS_PER_PEER_PER_MINUTE: u32 = 30;

impl Default for SessionPolicy {
    fn default() -> Self {
        Self {
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_sessions_per_user: DEFAULT_MAX_SESSIONS_PER_USER,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_age: DEFAULT_MAX_AGE,
            logins_per_user_per_minute: DEFAULT_LOGINS_PER_USER_PER_MINUTE,
            logins_per_peer_per_minute: DEFAULT_LOGINS_PER_PEER_PER_MINUTE,
        }
    }
}

/// One logged-in browser.
#[derive(Clone, Debug)]
pub struct Session {
    /// Who the API server said the token is, at login.
    pub user: Arc<User>,
    /// The token the user logged in with (kept here, never sent back to the browser).
    pub token: String,
    created: Instant,
    last_seen: Instant,
    /// Creation order (the oldest goes first when the store is full).
    seq: u64,
}

impl Session {
    fn alive(&self, now: Instant, policy: &SessionPolicy) -> bool {
        now.duration_since(self.created) < policy.max_age
            && now.duration_since(self.last_seen) < policy.idle_timeout
    }
}

/// A random id could not be drawn (the OS's random source failed).
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random source failed")]
pub struct RandomError;

/// `n` random bytes from the OS's CSPRNG, hex-encoded.
pub fn random_hex(n: usize) -> Result<String, RandomError> {
    let mut bytes = vec![0u8; n];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| RandomError)?;
    Ok(hex(&bytes))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether `id` has the shape of an id this store hands out (anything else is not looked
/// up at all).
fn well_formed(id: &str) -> bool {
    id.len() == ID_BYTES * 2 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The server-side session store.
#[derive(Debug)]
pub struct Sessions {
    policy: SessionPolicy,
    map: Mutex<(u64, HashMap<String, Session>)>,
    /// Logins per user name.
    logins: Buckets<String>,
    /// Login attempts per client address ([`peer_key`]); `None`: not limited.
    peers: Option<Buckets<IpAddr>>,
}

impl Sessions {
    /// An empty store.
    pub fn new(policy: SessionPolicy) -> Self {
        let max_sessions = policy.max_sessions.max(1);
        let logins = policy.logins_per_user_per_minute.max(1);
        Self {
            policy: SessionPolicy {
                max_sessions,
                max_sessions_per_user: policy.max_sessions_per_user.max(1),
                logins_per_user_per_minute: logins,
                ..policy
            },
            map: Mutex::new((0, HashMap::new())),
            logins: Buckets::new(Rate::per_minute(logins), max_sessions),
            peers: (policy.logins_per_peer_per_minute > 0).then(|| {
                Buckets::new(
                    Rate::per_minute(policy.logins_per_peer_per_minute),
                    max_sessions,
                )
            }),
        }
    }

    /// Whether a login attempt from `peer` may go on now (takes one of its minute's
    /// budget; always when not limited).
    pub fn may_attempt_from(&self, peer: IpAddr) -> bool {
        self.peers.as_ref().is_none_or(|b| b.take(&peer_key(peer)))
    }

    /// Whether `user` may log in now (takes one login of its minute's budget).
    pub fn may_log_in(&self, user: &User) -> bool {
        self.logins.take(&user.name)
    }

    /// The policy.
    pub fn policy(&self) -> SessionPolicy {
        self.policy
    }

    /// A new session for `user`, logged in with `token`: its id.
    pub fn create(&self, user: Arc<User>, token: String) -> Result<String, RandomError> {
        let id = random_hex(ID_BYTES)?;
        let now = Instant::now();
        let mut guard = self.map.lock();
        let (next, map) = &mut *guard;
        *next += 1;
        let seq = *next;
        if map.len() >= self.policy.max_sessions {
            map.retain(|_, s| s.alive(now, &self.policy));
        }
        // This user's own oldest goes first (the cap is fixed, so one is enough), then,
        // the store full, anyone's oldest.
        let theirs = map.values().filter(|s| s.user.name == user.name).count();
        if theirs >= self.policy.max_sessions_per_user {
            evict_oldest(map, |s| s.user.name == user.name);
        }
        while map.len() >= self.policy.max_sessions {
            if !evict_oldest(map, |_| true) {
                break;
            }
        }
        map.insert(
            id.clone(),
            Session {
                user,
                token,
                created: now,
                last_seen: now,
                seq,
            },
        );
        Ok(id)
    }

    /// The live session `id`, marked as used now; `None` (and removed) when unknown,
    /// idle too long or too old.
    pub fn get(&self, id: &str) -> Option<Session> {
        if !well_formed(id) {
            return None;
        }
        let now = Instant::now();
        let mut guard = self.map.lock();
        let map = &mut guard.1;
        let session = map.get_mut(id)?;
        if !session.alive(now, &self.policy) {
            map.remove(id);
            return None;
        }
        session.last_seen = now;
        Some(session.clone())
    }

    /// Whether `id` is a live session, without marking it used (the live stream asks this
    /// before each event).
    pub fn contains(&self, id: &str) -> bool {
        let now = Instant::now();
        let guard = self.map.lock();
        guard.1.get(id).is_some_and(|s| s.alive(now, &self.policy))
    }

    /// End session `id` (logout, or its token no longer accepted).
    pub fn remove(&self, id: &str) {
        self.map.lock().1.remove(id);
    }

    /// Sessions held (live or not yet swept).
    pub fn len(&self) -> usize {
        self.map.lock().1.len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Removes the oldest session `which` accepts; whether there was one.
fn evict_oldest(map: &mut HashMap<String, Session>, which: impl Fn(&Session) -> bool) -> bool {
    let oldest = map
        .iter()
        .filter(|(_, s)| which(s))
        .min_by_key(|(_, s)| s.seq)
        .map(|(k, _)| k.clone());
    oldest.is_some_and(|k| map.remove(&k).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &str) -> Arc<User> {
        Arc::new(User {
            name: name.into(),
            ..User::default()
        })
    }

    #[test]
    fn ids_are_random_hex_and_map_to_the_user_not_the_token() {
        let s = Sessions::new(SessionPolicy::default());
        let a = s.create(user("alice"), "secret-token".into()).unwrap();
        let b = s.create(user("alice"), "secret-token".into()).unwrap();
        assert_ne!(a, b);
        assert!(well_formed(&a), "{a}");
        assert!(!a.contains("secret"));
        assert_eq!(s.get(&a).unwrap().user.name, "alice");
        // Forged or unknown ids, and the token itself, are no session.
        for forged in [
            "secret-token",
            "",
            &"0".repeat(64),
            &a.to_uppercase(),
            &a[..63],
        ] {
            assert!(s.get(forged).is_none(), "{forged}");
        }
        s.remove(&a);
        assert!(s.get(&a).is_none(), "logout deletes");
        assert!(s.get(&b).is_some());
    }

    #[test]
    fn sessions_expire_when_idle_and_when_old() {
        let idle = Sessions::new(SessionPolicy {
            idle_timeout: Duration::ZERO,
            ..SessionPolicy::default()
        });
        let id = idle.create(user("a"), "t".into()).unwrap();
        assert!(idle.get(&id).is_none());
        assert!(idle.is_empty(), "an expired session is removed when met");
        let old = Sessions::new(SessionPolicy {
            max_age: Duration::ZERO,
            ..SessionPolicy::default()
        });
        let id = old.create(user("a"), "t".into()).unwrap();
        assert!(!old.contains(&id));
        assert!(old.get(&id).is_none());
    }

    #[test]
    fn the_store_is_bounded_and_evicts_the_oldest() {
        let s = Sessions::new(SessionPolicy {
            max_sessions: 100,
            ..SessionPolicy::default()
        });
        let first = s.create(user("first"), "t".into()).unwrap();
        let second = s.create(user("second"), "t".into()).unwrap();
        let mut last = String::new();
        for i in 0..1_000 {
            last = s.create(user(&format!("u{i}")), "t".into()).unwrap();
            assert!(s.len() <= 100, "{} sessions", s.len());
        }
        assert_eq!(s.len(), 100);
        assert!(s.get(&first).is_none() && s.get(&second).is_none());
        assert_eq!(s.get(&last).unwrap().user.name, "u999");
    }

    /// One token logging in over and over (10,000 times) ends only its own older
    /// sessions: everyone else stays logged in.
    #[test]
    fn one_user_logging_in_again_and_again_evicts_only_its_own_sessions() {
        let s = Sessions::new(SessionPolicy {
            max_sessions: 100,
            max_sessions_per_user: 4,
            ..SessionPolicy::default()
        });
        let others: Vec<String> = (0..50)
            .map(|i| s.create(user(&format!("team-{i}")), "t".into()).unwrap())
            .collect();
        let mut mine = Vec::new();
        for _ in 0..10_000 {
            mine.push(s.create(user("flooder"), "t".into()).unwrap());
        }
        assert_eq!(s.len(), 54, "50 others + the flooder's newest 4");
        assert!(
            others.iter().all(|id| s.contains(id)),
            "another user lost a session"
        );
        assert!(mine[..mine.len() - 4].iter().all(|id| !s.contains(id)));
        assert!(mine[mine.len() - 4..].iter().all(|id| s.contains(id)));
    }

    #[test]
    fn a_user_logs_in_at_most_its_rate() {
        let s = Sessions::new(SessionPolicy {
            logins_per_user_per_minute: 5,
            ..SessionPolicy::default()
        });
        let (flooder, other) = (user("flooder"), user("other"));
        assert_eq!((0..10_000).filter(|_| s.may_log_in(&flooder)).count(), 5);
        assert!(s.may_log_in(&other), "another user's logins are its own");
    }

    #[test]
    fn one_peer_tries_at_most_its_rate_whatever_the_users() {
        let s = Sessions::new(SessionPolicy {
            logins_per_peer_per_minute: 5,
            ..SessionPolicy::default()
        });
        let ip = |a: &str| a.parse::<IpAddr>().unwrap();
        // Every attempt from one address counts, one user or many.
        assert_eq!(
            (0..1_000)
                .filter(|_| s.may_attempt_from(ip("10.0.0.1")))
                .count(),
            5
        );
        assert!(
            s.may_attempt_from(ip("10.0.0.2")),
            "another address is its own"
        );
        // An IPv6 host rotating through its /64 is one peer.
        let rotated = (0..1_000)
            .filter(|i| s.may_attempt_from(ip(&format!("2001:db8:0:1::{i:x}"))))
            .count();
        assert_eq!(rotated, 5);
        let off = Sessions::new(SessionPolicy {
            logins_per_peer_per_minute: 0,
            ..SessionPolicy::default()
        });
        assert!((0..1_000).all(|_| off.may_attempt_from(ip("10.0.0.1"))));
    }
}
