//! The cache's watch tasks: one per quota kind and one for Namespaces, each run forever by
//! [`run_watch`] (restart with backoff after a failure, freshness reports, and for the
//! quota kinds the re-lists `super::relists` asks for).

use std::time::Duration;

use futures::StreamExt;
use karmada_quota_shell::backoff::Backoff;
use karmada_quota_shell::untrusted::clip;
use kube::core::Resource;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

use super::freshness::{Freshness, Watch};
use super::{ApplyEvent, Cached, Coverage, WATCH_TIMEOUT_SECS, relists};
use karmada_quota_crds::QuotaObject;

/// First wait before a failed watch is restarted; doubled per failure in a row.
const RESTART_MIN: Duration = Duration::from_millis(500);
/// Longest wait before a failed watch is restarted.
const RESTART_MAX: Duration = Duration::from_secs(10);

/// One quota kind's watch over all namespaces, feeding `writer`; a quota that cannot be
/// enforced is logged at each event.
pub(super) async fn watch_quotas<K, W>(
    client: kube::Client,
    mut writer: W,
    watch: Watch,
    reports: (Freshness, Option<relists::Relists>),
    config: watcher::Config,
) where
    K: QuotaObject + Coverage,
    K::Scope: Send,
    W: ApplyEvent<Cached<K>> + Send + 'static,
{
    let api = kube::Api::<Cached<K>>::all(client);
    run_watch(api, watch, reports, config, move |event| {
        writer.apply_event(event);
        if let watcher::Event::Apply(q) | watcher::Event::InitApply(q) = event
            && let Err(errors) = &q.parsed
        {
            tracing::warn!(
                kind = K::KIND,
                namespace = q.namespace(),
                name = q.name(),
                errors = %clip(errors),
                "quota cannot be enforced; ResourceBindings in the namespaces it covers are refused"
            );
        }
    })
    .await;
}

/// Run the watch of `api` forever, handing each event to `apply`. An event that proves the
/// watch works (`InitDone`, `Apply`, `Delete`) reports it to `fresh`; an error is reported
/// and logged, and the watch starts over from a fresh list after a backoff (0.5 s doubling
/// to 10 s, reset by a success): kube's watcher would resume silently, and a resumed watch
/// on a quiet cluster sends nothing that could show it works again. With `relists` (the
/// quota kinds), a re-list asked for starts over at once, each list begun moves the read
/// generation, and each completed list reports the request generation it started at.
pub(super) async fn run_watch<K>(
    api: kube::Api<K>,
    watch: Watch,
    (fresh, relists): (Freshness, Option<relists::Relists>),
    config: watcher::Config,
    mut apply: impl FnMut(&watcher::Event<K>) + Send,
) where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let config = config.timeout(WATCH_TIMEOUT_SECS);
    let mut backoff = Backoff::new(RESTART_MIN, RESTART_MAX);
    let mut requests = relists.as_ref().map(relists::Relists::subscribe);
    loop {
        // The request generation this list answers (the newest asked for before it).
        let generation = requests.as_mut().map_or(0, |r| *r.borrow_and_update());
        let mut events = std::pin::pin!(watcher(api.clone(), config.clone()));
        let mut relist_now = false;
        loop {
            let event = tokio::select! {
                event = events.next() => event,
                () = relists::asked(&mut requests) => {
                    tracing::info!(watch = watch.as_str(), "re-listing, as the reservation batches asked");
                    relist_now = true;
                    None
                }
            };
            let Some(event) = event else { break };
            match event {
                Ok(event) => {
                    if matches!(
                        event,
                        watcher::Event::InitDone
                            | watcher::Event::Apply(_)
                            | watcher::Event::Delete(_)
                    ) {
                        fresh.succeeded(watch);
                        backoff.reset();
                    }
                    if let (watcher::Event::Init, Some(r)) = (&event, &relists) {
                        r.list_begun();
                    }
                    apply(&event);
                    if let (watcher::Event::InitDone, Some(r)) = (&event, &relists) {
                        r.listed(watch, generation);
                    }
                }
                Err(e) => {
                    fresh.failed(watch, &e);
                    tracing::warn!(
                        watch = watch.as_str(),
                        error = %clip(&e.to_string()),
                        failing_for = ?fresh.failing_for(watch),
                        retry_in = ?backoff.current(),
                        "watch failed; restarting it from a fresh list"
                    );
                    break;
                }
            }
        }
        if !relist_now {
            // A re-list asked for during the backoff starts at once.
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                () = relists::asked(&mut requests) => {}
            }
        }
    }
}
