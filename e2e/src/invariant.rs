//! The ledger's invariant read from the apiserver: per quota, what the stored bindings are
//! charged, what the quota counts, and the checks between them.
//!
//! ```text
//!  read(client, watched)    T0  list the bindings of every watched namespace: need
//!                               (Σ replicas × cpu) and each one's (uid, generation)
//!                           T1  list the reservation batches
//!                           T2  read each quota: its entries = status.reservations but
//!                               the fence, + the batch entries numbered above its
//!                               foldedThrough,
//!                               the same (uid, generation) once
//!                           ─▶ one Reading per quota (cpu in milli):
//!                                effective = used + entries            (what it counts)
//!                                committed = need + the entries no stored binding holds
//!                                            at their generation or later
//!                                            (admitted, not stored or not yet released)
//!  check(reading)           lost:       effective < need   (a stored binding not counted)
//!                           overcommit: committed > hard   (docs/reservations.md §3, S)
//! ```
//!
//! `effective` may count a binding twice — in `used`, once the controller observed it, and
//! in a batch above the quota's `foldedThrough`, until the controller's batch view has it
//! and folds (after an apiserver restart its binding watch can list before its batch watch
//! does). That only refuses more, so `effective > hard` is not an over-commit:
//! [`counted_over_hard`] names it, and `committed`, which counts each admission once, is
//! the check.
//!
//! The order of the reads is what makes one sample consistent while bindings are created
//! and the controller folds: a binding in the T0 list was admitted before T0, so its entry
//! is in a batch of the T1 list or in a batch already folded, and a fold is durable in the
//! quota before its batch is deleted (docs/reservations.md R17), so the T2 read shows it.
//! A batch created or folded after T1 only raises what T2 counts. Deletes of bindings must
//! not run between T0 and T2 (a deleted binding's charge leaves `used` and would look
//! lost): the load holds them back while a sample is taken (`load::Sampler`).

use std::collections::{BTreeMap, HashMap};

use anyhow::{Context, Result, anyhow};
use karmada_quota_core::fence;
use karmada_quota_core::ledger::{effective_usage, upsert};
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::quota::Reservation;
use karmada_quota_core::{Quantity, ResourceList};
use karmada_quota_crds::convert::{cluster_quota_state, quota_state};
use karmada_quota_crds::reservation_batch::parse_batch;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, KarmadaQuotaReservation};
use karmada_quota_status::BatchView;
use kube::api::{DynamicObject, ListParams};
use kube::{Api, Client};

use crate::webhook::bindings;

/// The resource the invariant is read for.
pub const CPU: &str = "requests.cpu";

/// What a sample reads.
#[derive(Clone, Debug, Default)]
pub struct Watched {
    /// KarmadaQuotas, as (namespace, name); their namespaces' bindings are the need.
    pub quotas: Vec<(String, String)>,
    /// A KarmadaClusterQuota selecting (at least) the namespaces of `quotas`.
    pub cluster_quota: Option<String>,
    /// The reservation batches' namespace (`--reservation-namespace`).
    pub batches: String,
}

/// One quota in one sample (cpu in milli).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `ns/name`, or `KarmadaClusterQuota name`.
    pub quota: String,
    /// `spec.hard`.
    pub hard: i128,
    /// What the stored bindings it covers are charged (Σ replicas × cpu).
    pub need: i128,
    /// What it counts: used + reservations (+ unfolded batch entries).
    pub effective: i128,
    /// need + the entries no stored binding holds at their generation or later.
    pub committed: i128,
    /// Entries pending on it (status and unfolded batch entries).
    pub pending: usize,
}

/// The broken invariants of one reading, each a line naming the quota and its numbers.
pub fn check(r: &Reading) -> Vec<String> {
    let mut out = Vec::new();
    if r.effective < r.need {
        out.push(format!(
            "lost: {} counts {}m (used + reservations) but the stored bindings need {}m",
            r.quota, r.effective, r.need
        ));
    }
    if r.committed > r.hard {
        out.push(format!(
            "overcommit: {} hard {}m, bindings {}m, committed {}m, effective {}m",
            r.quota, r.hard, r.need, r.committed, r.effective
        ));
    }
    out
}

/// A count over hard that is not an over-commit (module docs).
pub fn counted_over_hard(r: &Reading) -> Option<String> {
    (r.effective > r.hard && r.committed <= r.hard).then(|| {
        format!(
            "{} counts {}m over hard {}m; committed {}m",
            r.quota, r.effective, r.hard, r.committed
        )
    })
}

/// The stored bindings of some namespaces: need and (uid → generation).
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// Σ replicas × cpu (milli).
    pub need: i128,
    /// metadata.uid → metadata.generation.
    pub generations: HashMap<String, i64>,
}

/// cpu (milli) the stored bindings of `ns` are charged: Σ replicas × requests.cpu.
pub async fn needed_cpu_milli(client: &Client, ns: &str) -> Result<i128> {
    Ok(stored(client, ns).await?.need)
}

/// The stored bindings of `ns`.
pub async fn stored(client: &Client, ns: &str) -> Result<Stored> {
    let list = bindings(client, ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the bindings of {ns}"))?;
    stored_of(ns, list.items.iter())
}

/// The need and the generations of `items`, bindings of `ns` a caller listed (and kept:
/// a binding waiting in a quota's line is stored and charged nothing).
pub fn stored_of<'a>(ns: &str, items: impl Iterator<Item = &'a DynamicObject>) -> Result<Stored> {
    let mut out = Stored::default();
    for b in items {
        let spec = &b.data["spec"];
        let replicas = i128::from(spec["replicas"].as_i64().unwrap_or(0));
        let cpu = spec["replicaRequirements"]["resourceRequest"]["cpu"]
            .as_str()
            .unwrap_or("0");
        let cpu = Quantity::read(cpu)
            .map_err(|e| anyhow!("binding {ns}/{:?}: cpu {cpu}: {e}", b.metadata.name))?;
        out.need = out
            .need
            .saturating_add(replicas.saturating_mul(cpu.milli_value()));
        if let Some(uid) = &b.metadata.uid {
            out.generations
                .insert(uid.clone(), b.metadata.generation.unwrap_or(0));
        }
    }
    Ok(out)
}

/// The batches of `ns` as one view (every stored batch held); an empty one while the
/// apiserver does not serve the kind (a release before it, during an upgrade).
async fn batch_view(client: &Client, ns: &str) -> Result<BatchView> {
    let list = match Api::<KarmadaQuotaReservation>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(BatchView::new()),
        list => list.with_context(|| format!("listing the reservation batches of {ns}"))?,
    };
    let mut view = BatchView::new();
    for b in &list.items {
        view.insert(&parse_batch(b).map_err(|e| anyhow!("batch {:?}: {e}", b.metadata.name))?);
    }
    Ok(view)
}

/// What `state` counts, in cpu milli: `effective` (used + its entries but the fence +
/// the view's entries for it numbered above `folded`, each (uid, generation) once — the
/// webhook's count, docs/reservations.md "Effective usage"), `committed` (`stored.need` +
/// the entries no stored binding holds at their generation or later), and how many
/// entries are pending.
pub fn counts(
    state: &QuotaState,
    folded: Option<u64>,
    view: &BatchView,
    stored: &Stored,
) -> (i128, i128, usize) {
    let mut entries: Vec<Reservation> = fence::pending(&state.reservations).cloned().collect();
    for (_, e) in view.unfolded(&state.key(), folded) {
        upsert(&mut entries, e.clone());
    }
    let used = state.used.clone().unwrap_or_default();
    let effective = effective_usage(&used, &entries, None).get_or_zero(CPU);
    let unheld: Vec<Reservation> = entries
        .iter()
        .filter(|e| {
            stored
                .generations
                .get(&e.reserved_by.uid)
                .is_none_or(|g| *g < e.generation)
        })
        .cloned()
        .collect();
    let unheld = effective_usage(&ResourceList::new(), &unheld, None).get_or_zero(CPU);
    (
        effective.milli_value(),
        stored.need + unheld.milli_value(),
        entries.len(),
    )
}

fn hard_milli(state: &QuotaState, quota: &str) -> Result<i128> {
    state
        .spec
        .hard
        .get(CPU)
        .map(Quantity::milli_value)
        .ok_or_else(|| anyhow!("{quota} has no hard {CPU}"))
}

fn joined<E: ToString>(what: &str, errs: &[E]) -> anyhow::Error {
    let errs: Vec<String> = errs.iter().map(ToString::to_string).collect();
    anyhow!("{what}: {}", errs.join("; "))
}

/// One sample of every watched quota, read in the order the module docs give.
pub async fn read(client: &Client, watched: &Watched) -> Result<Vec<Reading>> {
    let mut per_ns: BTreeMap<String, Stored> = BTreeMap::new();
    for (ns, _) in &watched.quotas {
        if !per_ns.contains_key(ns) {
            per_ns.insert(ns.clone(), stored(client, ns).await?);
        }
    }
    read_after(client, watched, &per_ns).await
}

/// The rest of a sample (T1 the batches, T2 the quotas) once its caller listed the
/// bindings (T0) of every watched namespace into `per_ns` ([`stored_of`]).
pub async fn read_after(
    client: &Client,
    watched: &Watched,
    per_ns: &BTreeMap<String, Stored>,
) -> Result<Vec<Reading>> {
    let view = batch_view(client, &watched.batches).await?;
    let reading = |quota: String, state: &QuotaState, folded, stored: &Stored| {
        let (effective, committed, pending) = counts(state, folded, &view, stored);
        Ok::<_, anyhow::Error>(Reading {
            hard: hard_milli(state, &quota)?,
            need: stored.need,
            effective,
            committed,
            pending,
            quota,
        })
    };
    let mut out = Vec::new();
    for (ns, name) in &watched.quotas {
        let label = format!("{ns}/{name}");
        let q = Api::<KarmadaQuota>::namespaced(client.clone(), ns)
            .get(name)
            .await
            .with_context(|| format!("reading KarmadaQuota {label}"))?;
        let folded = q.status.as_ref().and_then(|s| s.folded_through);
        let state = quota_state(&q).map_err(|e| joined(&label, &e))?;
        let stored = per_ns
            .get(ns)
            .with_context(|| format!("no binding list of {ns} for {label}"))?;
        out.push(reading(label, &state, folded, stored)?);
    }
    if let Some(name) = &watched.cluster_quota {
        let label = format!("KarmadaClusterQuota {name}");
        let q = Api::<KarmadaClusterQuota>::all(client.clone())
            .get(name)
            .await
            .with_context(|| format!("reading {label}"))?;
        let folded = q.status.as_ref().and_then(|s| s.quota.folded_through);
        let state = cluster_quota_state(&q).map_err(|e| joined(&label, &e))?;
        let mut all = Stored::default();
        for s in per_ns.values() {
            all.need += s.need;
            all.generations.extend(s.generations.clone());
        }
        out.push(reading(label, &state, folded, &all)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::quota::{QuotaSpec, ReservedBy};
    use karmada_quota_core::selection::{Covers, QuotaKey};
    use karmada_quota_crds::reservation_batch::ParsedBatch;

    fn cpu(q: &str) -> ResourceList {
        let mut l = ResourceList::new();
        l.insert(CPU, Quantity::parse(q).unwrap());
        l
    }

    fn entry(uid: &str, generation: i64, milli: &str) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                name: uid.into(),
                uid: uid.into(),
                ..ReservedBy::default()
            },
            generation,
            reserved: cpu(milli),
            expiration_time: 0,
        }
    }

    fn state(used: &str, entries: Vec<Reservation>) -> QuotaState {
        QuotaState {
            name: "q".into(),
            covers: Covers::Namespace("a".into()),
            spec: QuotaSpec {
                hard: cpu("1"),
                ..QuotaSpec::default()
            },
            used: Some(cpu(used)),
            reservations: entries,
            clusters: Vec::new(),
        }
    }

    fn reading(need: i128, committed: i128, effective: i128) -> Reading {
        Reading {
            quota: "a/q".into(),
            hard: 1000,
            need,
            effective,
            committed,
            pending: 0,
        }
    }

    fn stored(need: i128, bindings: &[(&str, i64)]) -> Stored {
        Stored {
            need,
            generations: bindings
                .iter()
                .map(|(u, g)| ((*u).to_owned(), *g))
                .collect(),
        }
    }

    #[test]
    fn the_check_reports_an_overcommit_and_a_lost_charge_and_nothing_else() {
        assert!(check(&reading(1000, 1000, 1000)).is_empty(), "full");
        assert!(check(&reading(300, 900, 900)).is_empty(), "pending entries");
        let over = check(&reading(1100, 1100, 1100));
        assert_eq!(over.len(), 1);
        assert!(
            over[0].starts_with("overcommit: a/q hard 1000m, bindings 1100m, committed 1100m"),
            "{over:?}"
        );
        assert!(check(&reading(500, 1001, 1001))[0].starts_with("overcommit:"));
        let lost = check(&reading(700, 700, 600));
        assert_eq!(lost.len(), 1);
        assert!(lost[0].starts_with("lost: a/q counts 600m"), "{lost:?}");
        assert_eq!(check(&reading(1200, 1200, 900)).len(), 2, "lost and over");
        // Counted twice, committed within hard: not an over-commit, but named.
        assert!(check(&reading(800, 900, 1200)).is_empty());
        assert!(counted_over_hard(&reading(800, 900, 1200)).is_some());
        assert!(counted_over_hard(&reading(800, 900, 1000)).is_none());
    }

    #[test]
    fn batch_entries_count_above_folded_through_once_per_uid_and_generation() {
        let key = QuotaKey::Namespaced {
            namespace: "a".into(),
            name: "q".into(),
        };
        let mut view = BatchView::new();
        for (sequence, entries) in [
            (1, vec![entry("x", 1, "100m")]),
            (2, vec![entry("y", 1, "200m"), entry("z", 1, "50m")]),
            (3, vec![entry("w", 2, "400m")]),
        ] {
            view.insert(&ParsedBatch {
                sequence,
                entries: entries.into_iter().map(|e| (key.clone(), e)).collect(),
                writer: None,
                uid: None,
            });
        }
        // Folded through 1: batch 1 is in used; z is also carried in the status. Stored:
        // x (100m, in used), y at generation 1 (200m, not in used yet); w's binding is
        // stored at generation 1, its scale-up (generation 2) not yet; z never stored.
        let s = state("100m", vec![entry("z", 1, "50m")]);
        let st = stored(300, &[("x", 1), ("y", 1), ("w", 1)]);
        // effective 100 + z 50 + y 200 + w 400; committed 300 + z 50 + w 400.
        assert_eq!(counts(&s, Some(1), &view, &st), (750, 750, 3));
        assert_eq!(counts(&s, Some(3), &view, &st), (150, 350, 1));
        // Not folded at all: x is in used and in batch 1 (counted twice), held by x.
        assert_eq!(counts(&s, None, &view, &st), (850, 750, 4));
        // The reservation-store fence in the status counts for nothing.
        let mut fenced = s.clone();
        karmada_quota_core::fence::ensure(&mut fenced.reservations, &fenced.spec.hard);
        assert_eq!(counts(&fenced, Some(3), &view, &st), (150, 350, 1));
    }
}
