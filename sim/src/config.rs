//! What a run simulates: its seed, its size, and which faults it injects. A seed also
//! picks the fault kinds of its run (each on with one chance in two, "swarm" testing:
//! a run that injects fewer kinds injects each of them more densely), unless the caller
//! fixes them.

use crate::rng::Rng;

/// The fault kinds, each on or off for a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Per-watcher delays of each event (so kinds are reordered across watches; one
    /// kind's watch keeps its order), now and then a long one.
    pub delays: bool,
    /// All watches of one replica (or of the controller) fall silent for seconds, with
    /// no error (a dead connection not reset yet).
    pub stalls: bool,
    /// A watch fails (410 Gone, a reset) and lists again; a list may break off midway.
    pub watch_errors: bool,
    /// A list older than one before it (another apiserver's watch cache).
    pub stale_lists: bool,
    /// API calls fail: batch creates and deletes, quota reads and status writes.
    pub store_errors: bool,
    /// A create, delete or status write that succeeded but whose answer was lost.
    pub lost_answers: bool,
    /// A webhook replica or the controller crashes and restarts (fresh memory, re-list).
    pub crashes: bool,
    /// The replicas' clocks are off by up to two seconds.
    pub skew: bool,
    /// A quota's `hard` is lowered or raised.
    pub quota_edits: bool,
    /// A request the webhook allowed is not stored (another admission plugin refused it).
    pub dropped: bool,
    /// A batch watch event lands while a decision runs (before it reads the next
    /// number), as the watch's task does on another thread in production.
    pub preempt: bool,
    /// Stale lists for the controller's binding watch too: a cache older than what the
    /// watch had seen, which its bounded re-lists (`NotOlderThan`) wait for or are refused
    /// by (bench/sim.md, finding 2).
    pub stale_binding_lists: bool,
}

impl Faults {
    /// Names of the kinds, in field order (for `--faults` and the trace).
    pub const NAMES: [&'static str; 12] = [
        "delays",
        "stalls",
        "watch_errors",
        "stale_lists",
        "store_errors",
        "lost_answers",
        "crashes",
        "skew",
        "quota_edits",
        "dropped",
        "preempt",
        "stale_binding_lists",
    ];

    fn flags(&mut self) -> [&mut bool; 12] {
        [
            &mut self.delays,
            &mut self.stalls,
            &mut self.watch_errors,
            &mut self.stale_lists,
            &mut self.store_errors,
            &mut self.lost_answers,
            &mut self.crashes,
            &mut self.skew,
            &mut self.quota_edits,
            &mut self.dropped,
            &mut self.preempt,
            &mut self.stale_binding_lists,
        ]
    }

    /// Every kind.
    pub fn all() -> Self {
        let mut f = Self::default();
        for flag in f.flags() {
            *flag = true;
        }
        f
    }

    /// Each kind on with one chance in two; stale binding lists only with stale lists (a
    /// lagging apiserver), so one run in four.
    pub fn swarm(rng: &mut Rng) -> Self {
        let mut f = Self::default();
        for flag in f.flags() {
            *flag = rng.chance(500);
        }
        f.stale_binding_lists &= f.stale_lists;
        f
    }

    /// The kinds named in `list` (comma-separated; `all`, `none`).
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut f = Self::default();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match name {
                "all" => f = Self::all(),
                "none" => f = Self::default(),
                _ => {
                    let i = Self::NAMES
                        .iter()
                        .position(|n| *n == name)
                        .ok_or_else(|| format!("unknown fault kind {name:?}: {:?}", Self::NAMES))?;
                    *f.flags()[i] = true;
                }
            }
        }
        Ok(f)
    }

    /// The kinds on, comma-separated (`none` when none).
    pub fn describe(&self) -> String {
        let mut f = *self;
        let on: Vec<&str> = f
            .flags()
            .into_iter()
            .zip(Self::NAMES)
            .filter(|(on, _)| **on)
            .map(|(_, n)| n)
            .collect();
        if on.is_empty() {
            "none".into()
        } else {
            on.join(",")
        }
    }
}

/// One run.
#[derive(Clone, Debug)]
pub struct Config {
    /// The seed: one seed, one run.
    pub seed: u64,
    /// Workload steps (creates, scales, deletes, edits, crashes).
    pub steps: u32,
    /// Webhook replicas (1 to [`crate::clock::MAX_REPLICAS`]).
    pub replicas: usize,
    /// Namespaces, one quota each.
    pub quotas: usize,
    /// The fault kinds; `None`: the seed picks them.
    pub faults: Option<Faults>,
    /// Liveness is per request: a fitting request denied by one replica fails the run
    /// (else the client retries a denial, as it retries an error, through any replica).
    pub strict_liveness: bool,
    /// Run the liveness phase (off: safety alone, e.g. to count the seeds a revert needs
    /// to over-commit).
    pub liveness: bool,
    /// The longest wait before a failed watch lists again (ms; the shortest is 200).
    pub backoff_max_ms: u64,
    /// Once the faults stopped and everything is folded, a hand deletes the newest batch
    /// and every webhook replica restarts (docs/reservations.md §6, "Hand edits"): outside
    /// the model, so the run checks that requests are admitted again (R20), not a new
    /// schedule for S (the batch deleted holds nothing unfolded by then).
    pub hand_deletes_newest: bool,
    /// A standby controller beside the leader, its watches running, that takes the lease
    /// when the leader crashes or is deposed (a new leader whose index may be behind the
    /// last status written: R21); `None`: the seed picks, one run in two, from a draw of
    /// its own (so a seed without a standby runs as it did before the standby existed).
    pub standby: Option<bool>,
    /// The last namespace's quota is created while the run goes on (0.3–3 s in) rather
    /// than before it: replicas learn of it from their quota watches (a list older than
    /// its creation would miss it; R23's consistent lists never are, which
    /// `revert-consistent-quota-lists` undoes). Clients
    /// use the namespace once every running replica holds the quota (then it is in force:
    /// an admission there that it does not charge is an over-commit). `None`: the seed
    /// picks, one run in four with two quotas or more, from a draw of its own (a seed
    /// without it runs as before).
    pub late_quota: Option<bool>,
    /// With a late quota: clients use its namespace from its creation on, before every
    /// replica holds it. A replica that does not hold it yet admits there uncharged (a
    /// quota applies once seen, as a ResourceQuota does), and batches of the replicas that
    /// hold it name a quota the others lack (R9's tombstones). Until every running replica
    /// holds the quota, the invariant leaves out the bindings a replica without it
    /// admitted (they stand for usage that predates the quota); from then on every
    /// admission there counts. `None`: the seed picks, one late-quota run in two, from a
    /// draw of its own (a seed without it runs as before).
    pub early_use: Option<bool>,
    /// The webhook replicas' `--batch-linger`, ms; 0 (the product's default, so every
    /// recorded seed replays as before the flag existed) unless set. The suite runs seeds
    /// with 1–300 ms too.
    pub linger_ms: u64,
}

impl Config {
    /// Whether this run has a standby controller: [`Config::standby`], or the seed's own
    /// draw.
    pub fn with_standby(&self) -> bool {
        self.standby
            .unwrap_or_else(|| crate::rng::Rng::new(self.seed ^ 0x5354_414e_4442_5900).chance(500))
    }

    /// Whether this run creates its last quota late: [`Config::late_quota`], or the seed's
    /// own draw.
    pub fn with_late_quota(&self) -> bool {
        self.quotas >= 2
            && self.late_quota.unwrap_or_else(|| {
                crate::rng::Rng::new(self.seed ^ 0x4c41_5445_5155_4f54).chance(250)
            })
    }

    /// Whether this run's clients use the late quota's namespace from its creation on:
    /// [`Config::early_use`], or the seed's own draw; never without a late quota.
    pub fn with_early_use(&self) -> bool {
        self.with_late_quota()
            && self.early_use.unwrap_or_else(|| {
                crate::rng::Rng::new(self.seed ^ 0x4541_524c_5955_5345).chance(500)
            })
    }

    /// The defaults for `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            seed,
            steps: 60,
            replicas: 2,
            quotas: 2,
            faults: None,
            strict_liveness: false,
            liveness: true,
            backoff_max_ms: 1_000,
            hand_deletes_newest: false,
            standby: None,
            late_quota: None,
            early_use: None,
            linger_ms: 0,
        }
    }
}
