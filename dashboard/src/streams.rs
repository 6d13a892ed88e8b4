//! The cap on live streams (`GET /events`): at most `max_total` open at once, and at
//! most `max_per_user` per reviewed user (with `--dashboard-auth=none` there is no user:
//! only the total applies). A stream holds a [`StreamPermit`] for as long as it is open;
//! a request beyond either cap is answered 503 at once.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

/// How many live streams may be open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Over every viewer.
    pub max_total: usize,
    /// Per reviewed user.
    pub max_per_user: usize,
}

/// Default total cap.
pub const DEFAULT_MAX_STREAMS: usize = 256;
/// Default cap per user (a few tabs).
pub const DEFAULT_MAX_STREAMS_PER_USER: usize = 8;

impl Default for StreamLimits {
    fn default() -> Self {
        Self {
            max_total: DEFAULT_MAX_STREAMS,
            max_per_user: DEFAULT_MAX_STREAMS_PER_USER,
        }
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_user: HashMap<String, usize>,
}

/// The open streams.
#[derive(Debug)]
pub struct Streams {
    limits: StreamLimits,
    counts: Arc<Mutex<Counts>>,
}

/// Why a stream was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// Every stream slot is taken.
    #[error("too many live streams are open ({0}); try again later")]
    Total(usize),
    /// This user has its share open.
    #[error("{user} has {max} live streams open already; close a tab")]
    PerUser {
        /// Who.
        user: String,
        /// Their cap.
        max: usize,
    },
}

/// One open stream; its slot is freed when dropped.
#[derive(Debug)]
pub struct StreamPermit {
    counts: Arc<Mutex<Counts>>,
    user: Option<String>,
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(u) = &self.user
            && let Some(n) = c.per_user.get_mut(u)
        {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_user.remove(u);
            }
        }
    }
}

impl Streams {
    /// No stream open yet.
    pub fn new(limits: StreamLimits) -> Self {
        Self {
            limits: StreamLimits {
                max_total: limits.max_total.max(1),
                max_per_user: limits.max_per_user.max(1),
            },
            counts: Arc::default(),
        }
    }

    /// A slot for a stream of `user` (`None`: no authentication), or why not.
    pub fn open(&self, user: Option<&str>) -> Result<StreamPermit, Refused> {
        let mut c = self.counts.lock();
        if c.total >= self.limits.max_total {
            return Err(Refused::Total(self.limits.max_total));
        }
        if let Some(u) = user {
            let n = c.per_user.entry(u.to_owned()).or_default();
            if *n >= self.limits.max_per_user {
                return Err(Refused::PerUser {
                    user: u.to_owned(),
                    max: self.limits.max_per_user,
                });
            }
            *n += 1;
        }
        c.total += 1;
        Ok(StreamPermit {
            counts: self.counts.clone(),
            user: user.map(str::to_owned),
        })
    }

    /// Streams open now.
    pub fn open_now(&self) -> usize {
        self.counts.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_per_user_and_in_total_and_slots_come_back() {
        let s = Streams::new(StreamLimits {
            max_total: 3,
            max_per_user: 2,
        });
        let a1 = s.open(Some("a")).unwrap();
        let _a2 = s.open(Some("a")).unwrap();
        assert_eq!(
            s.open(Some("a")).unwrap_err(),
            Refused::PerUser {
                user: "a".into(),
                max: 2
            }
        );
        let _b = s.open(Some("b")).unwrap();
        assert_eq!(s.open(Some("c")).unwrap_err(), Refused::Total(3));
        assert_eq!(s.open(None).unwrap_err(), Refused::Total(3));
        drop(a1);
        assert_eq!(s.open_now(), 2);
        let _a3 = s.open(Some("a")).unwrap();
        assert_eq!(s.open_now(), 3);
    }
}
