//! The control-plane watches: KarmadaQuota (reflector store), ResourceBinding and Cluster (index), each guarded and retried.
//!
//! ```text
//!  KarmadaQuota    ─► reflector store ─► deleted quotas' views and metrics forgotten ─► Controller
//!  ResourceBinding ─► count name resolved (shell::plurals) ─► index ─► Triggers (touched namespaces)
//!                     unpriced ones (discovery failed): priced again every UNPRICED_RETRY
//!                     (the resolver backs off its discovery requests on its own)
//!                     listed by cache_list: a consistent first list, re-lists never older
//!                     than the newest binding seen, streaming lists where offered
//!  Cluster         ─► index ─► desired members ─► Members::sync
//! ```
//!
//! Only the binding watch's lists need a bound: its index counts a binding missing from
//! a re-list as deleted, which lowers `used`. The other watches here list with
//! `resourceVersion=0` (`shell::watch_cache`); a stale quota copy costs the status write
//! a 409, and a stale Cluster list a member connected late or kept a little longer
//! (docs/decisions/0003-apiserver-versions.md).

use std::sync::Arc;

use parking_lot::RwLock;
use std::time::Duration;

use futures::{Stream, StreamExt, TryStreamExt};
use karmada_quota_crds::{Cluster, KarmadaQuota, ResourceBinding};
use karmada_quota_shell::plurals::PluralResolver;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, reflector::store::Writer};
use kube::{Api, Client, ResourceExt};
use tracing::Span;

use crate::api::Views;
use crate::clock::now_secs;
use crate::fence::Fence;
use crate::index::{CountResolution, Index, Touched};
use crate::members::MemberKubeconfig;
use crate::members::{Members, desired_members};
use crate::metrics::Metrics;
use crate::queue::Line;
use crate::triggers::Triggers;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// How often bindings whose count name could not be resolved are priced again.
const UNPRICED_RETRY: Duration = Duration::from_secs(1);

/// An `Api` over one namespace (`--namespace`) or all of them.
pub(crate) fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// What the control-plane watches cover.
pub(crate) struct Scope<'a> {
    /// The one namespace watched (`--namespace`); `None`: all.
    pub(crate) namespace: Option<&'a str>,
    /// When Cluster objects are watched (`--member-clusters-from-api`, never for
    /// `--role=dashboard`): the `--member-kubeconfig` members beside them.
    pub(crate) clusters: Option<Vec<MemberKubeconfig>>,
}

/// Spawn the ResourceBinding watch of the scope's namespace and, when the scope reads
/// Cluster objects, the Cluster watch.
pub(crate) fn spawn_control_plane(
    Scope {
        namespace,
        clusters,
    }: Scope<'_>,
    client: &Client,
    index: &Arc<RwLock<Index>>,
    members: &Arc<Members>,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
    (line, fence): (&Arc<Line>, &Fence),
) {
    tokio::spawn(watch_bindings(
        scoped_api::<ResourceBinding>(client, namespace),
        (index.clone(), fence.asked()),
        PluralResolver::new(client.clone()),
        triggers.clone(),
        metrics.clone(),
        line.clone(),
    ));
    if let Some(kubeconfigs) = clusters {
        tokio::spawn(watch_clusters(
            Api::<Cluster>::all(client.clone()),
            index.clone(),
            members.clone(),
            kubeconfigs,
            metrics.clone(),
        ));
    }
}

/// The quota watch: its reflector store (which the controller reads), and the stream of
/// applied quotas that drives the controller. Deleted quotas' views and metrics are
/// forgotten once the store no longer has them; the index learns when the quotas were
/// listed (for readiness: kube's `Store::wait_until_ready` wakes only one of several
/// waiters, and the Controller already waits on it).
pub(crate) fn quotas(
    namespace: Option<&str>,
    client: &Client,
    index: &Arc<RwLock<Index>>,
    views: &Views,
    metrics: &Arc<Metrics>,
    line: &Arc<Line>,
) -> (
    Store<KarmadaQuota>,
    impl Stream<Item = Result<KarmadaQuota, watcher::Error>> + Send + 'static + use<>,
) {
    let (reader, writer): (Store<KarmadaQuota>, Writer<KarmadaQuota>) = reflector::store();
    let (store, index, views) = (reader.clone(), index.clone(), views.clone());
    let (errors, forget) = (metrics.clone(), metrics.clone());
    let line = line.clone();
    let stream = watcher(
        scoped_api::<KarmadaQuota>(client, namespace),
        from_watch_cache(),
    )
    .default_backoff()
    .inspect_err(move |e| {
        tracing::warn!(error = %e, "KarmadaQuota watch error; retrying");
        errors.watch_restarted("karmadaquotas");
    })
    .reflect(writer)
    .inspect_ok(move |ev| {
        if matches!(ev, Event::InitDone) {
            index.write().quotas_listed();
        }
        forget_deleted(ev, &store, &views, &forget);
        // A quota's status changed (room freed, a new limit, a new mode): plan again.
        line.wake();
    })
    .applied_objects();
    (reader, stream)
}

/// After the store applied `ev`: forget the views and metrics of quotas it no longer has.
fn forget_deleted(
    ev: &Event<KarmadaQuota>,
    store: &Store<KarmadaQuota>,
    views: &Views,
    metrics: &Metrics,
) {
    match ev {
        Event::Delete(q) => {
            let (ns, name) = (q.namespace().unwrap_or_default(), q.name_any());
            metrics.forget_quota(&ns, &name);
            views.remove([&(ns, name)]);
        }
        Event::InitDone => {
            let gone: Vec<_> = views
                .read()
                .keys()
                .filter(|(ns, name)| store.get(&ObjectRef::new(name).within(ns)).is_none())
                .cloned()
                .collect();
            for key in &gone {
                metrics.forget_quota(&key.0, &key.1);
            }
            views.remove(&gone);
        }
        _ => {}
    }
}

/// Feed ResourceBinding events into the index (count names resolved first) and trigger the
/// quotas of the namespaces that changed; price unpriced bindings again meanwhile. The
/// watch lists again, consistently, when the fence asks (`relists`), and the index learns
/// the generation of each complete list (`crate::fence`).
async fn watch_bindings(
    api: Api<ResourceBinding>,
    (index, relists): (Arc<RwLock<Index>>, tokio::sync::watch::Receiver<u64>),
    counts: PluralResolver,
    triggers: Triggers,
    metrics: Arc<Metrics>,
    line: Arc<Line>,
) {
    let mut events =
        crate::cache_list::listed_events(api, "resourcebindings", metrics.clone(), Some(relists));
    let mut retry = tokio::time::interval(UNPRICED_RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (generation, ev) = tokio::select! {
            ev = events.next() => match ev {
                Some(ev) => ev,
                None => return,
            },
            _ = retry.tick() => {
                price_unpriced(&index, &counts, &triggers).await;
                continue;
            }
        };
        let count = match &ev {
            Event::Apply(rb) | Event::InitApply(rb) => {
                let r = &rb.spec.resource;
                counts.count(&r.api_version, &r.kind).await
            }
            _ => Ok(None),
        };
        let (touched, n) = fold(&index, &ev, &count);
        if matches!(ev, Event::InitDone) {
            index.write().bindings_listed(generation);
        }
        metrics.set_bindings(n);
        triggers.namespaces(touched);
        line.apply(&ev, count.as_ref().ok().and_then(|c| c.as_deref()));
        line.wake();
    }
}

/// Fold one ResourceBinding watch event into the index: the namespaces whose bindings
/// changed, and how many bindings the index holds now. A binding's own event is folded in
/// a `fold` span carrying `binding` (`namespace/name`: the value the webhook's `review`
/// span of the same binding carries) and `namespace`, and logged at debug (trace for a
/// re-list's, which is folded in bulk at its end), so one log query on `binding` follows
/// a binding from its admission to its fold.
fn fold(
    index: &RwLock<Index>,
    ev: &Event<ResourceBinding>,
    count: &Result<Option<String>, String>,
) -> (Touched, usize) {
    let span = match ev {
        Event::Apply(rb) | Event::Delete(rb) => fold_span(rb, false),
        Event::InitApply(rb) => fold_span(rb, true),
        Event::Init | Event::InitDone => Span::none(),
    };
    let _in = span.enter();
    let (touched, n) = {
        let mut idx = index.write();
        let touched = idx.apply_resolved_binding_event(ev, as_resolution(count), now_secs());
        (touched, idx.binding_count())
    };
    match ev {
        Event::Apply(_) | Event::Delete(_) => tracing::debug!(
            event = if matches!(ev, Event::Apply(_)) {
                "apply"
            } else {
                "delete"
            },
            changed = !touched.is_empty(),
            "ResourceBinding folded into the index"
        ),
        Event::InitApply(_) => {
            tracing::trace!("ResourceBinding listed; folded at the end of the re-list");
        }
        Event::Init | Event::InitDone => {}
    }
    (touched, n)
}

/// The `fold` span of binding `rb`: at debug, or at trace for a re-list's (`listed`).
fn fold_span(rb: &ResourceBinding, listed: bool) -> Span {
    let namespace = rb.metadata.namespace.as_deref().unwrap_or_default();
    let name = rb.metadata.name.as_deref().unwrap_or_default();
    let binding = format_args!("{namespace}/{name}");
    if listed {
        tracing::trace_span!("fold", binding = %binding, namespace)
    } else {
        tracing::debug_span!("fold", binding = %binding, namespace)
    }
}

fn as_resolution(count: &Result<Option<String>, String>) -> CountResolution<'_> {
    match count {
        Ok(name) => Ok(name.as_deref()),
        Err(reason) => Err(reason.as_str()),
    }
}

/// Resolve the count names of the unpriced bindings again (the resolver asks discovery
/// only when its backoff allows) and trigger the namespaces priced.
async fn price_unpriced(index: &RwLock<Index>, counts: &PluralResolver, triggers: &Triggers) {
    let unpriced = index.read().unpriced();
    for (ns, uid, api_version, kind) in unpriced {
        let count = counts.count(&api_version, &kind).await;
        let touched = index.write().price(&ns, &uid, as_resolution(&count));
        if !touched.is_empty() {
            tracing::info!(namespace = %ns, %kind, %api_version, "object count of a binding priced after discovery recovered");
        }
        triggers.namespaces(touched);
    }
}

/// Feed Cluster events into the index and keep the member watches in line with them.
async fn watch_clusters(
    api: Api<Cluster>,
    index: Arc<RwLock<Index>>,
    members: Arc<Members>,
    flags: Vec<MemberKubeconfig>,
    metrics: Arc<Metrics>,
) {
    let mut events = guarded_events(api, "clusters", metrics);
    while let Some(ev) = events.next().await {
        let desired = {
            let mut idx = index.write();
            if !idx.apply_cluster_event(&ev) {
                continue;
            }
            desired_members(idx.clusters().values().map(AsRef::as_ref), &flags)
        };
        members.sync(&desired);
    }
}

/// The events of a watch on `api`, re-established with backoff. An error never ends the
/// stream (one malformed object must not stall the watch): it is logged and counted as a
/// restart of `what`.
fn guarded_events<K>(
    api: Api<K>,
    what: &'static str,
    metrics: Arc<Metrics>,
) -> futures::stream::BoxStream<'static, Event<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, from_watch_cache())
        .default_backoff()
        .filter_map(move |ev| {
            let ok = match ev {
                Ok(ev) => Some(ev),
                Err(e) => {
                    tracing::warn!(error = %e, watch = what, "watch error; retrying");
                    metrics.watch_restarted(what);
                    None
                }
            };
            std::future::ready(ok)
        })
        .boxed()
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::*;
    use crate::testutil::mk_binding;

    /// The fold of a binding's watch event logs, at debug, in a `fold` span whose
    /// `binding` is `namespace/name`: what the webhook's `review` span says of it.
    #[test]
    fn a_folded_binding_is_logged_under_its_namespace_and_name() {
        let out: Arc<Mutex<Vec<u8>>> = Arc::default();
        let sink = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || SharedBuf(sink.clone()))
            .finish();
        let index = RwLock::new(Index::new(3600));
        let rb = mk_binding("team-a", "web", "uid-web", 1, 2, "1", &[]);
        tracing::subscriber::with_default(subscriber, || {
            fold(&index, &Event::Init, &Ok(None));
            fold(&index, &Event::InitDone, &Ok(None));
            fold(&index, &Event::Apply(rb.clone()), &Ok(None));
            fold(&index, &Event::Delete(rb), &Ok(None));
        });
        let text = String::from_utf8(out.lock().clone()).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        for (line, event) in lines.iter().zip(["apply", "delete"]) {
            assert_eq!(
                line["fields"]["message"],
                "ResourceBinding folded into the index"
            );
            assert_eq!(line["fields"]["event"], event);
            assert_eq!(line["fields"]["changed"], true);
            assert_eq!(line["span"]["name"], "fold");
            assert_eq!(line["span"]["binding"], "team-a/web", "{line}");
            assert_eq!(line["span"]["namespace"], "team-a");
        }
    }

    /// Writes into a shared buffer.
    struct SharedBuf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for SharedBuf {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
}
