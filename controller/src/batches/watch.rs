//! The watch of the reservation batches in `--reservation-namespace`: listed from the
//! apiserver's watch cache like every control-plane watch, read as dynamic objects (one
//! malformed batch is logged and held aside, it cannot stall the list), folded into
//! [`Batches`], and every quota a new batch names is reconciled.

use std::sync::Arc;

use futures::StreamExt;
use karmada_quota_crds::KarmadaQuotaReservation;
use karmada_quota_shell::watch_cache::from_watch_cache;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use super::Batches;
use crate::metrics::Metrics;
use crate::triggers::Triggers;

/// Watch the batches of `namespace` until the stream ends (never: errors are retried with
/// backoff, logged and counted as restarts of `karmadaquotareservations`).
pub async fn watch(
    client: Client,
    namespace: String,
    batches: Arc<Batches>,
    triggers: Triggers,
    metrics: Arc<Metrics>,
) {
    let resource = ApiResource::erase::<KarmadaQuotaReservation>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
    let mut events = watcher(api, from_watch_cache()).default_backoff().boxed();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => {
                let quotas = batches.apply(&ev);
                triggers.quotas(&quotas);
            }
            Err(e) => {
                tracing::warn!(error = %e, namespace = %namespace, "KarmadaQuotaReservation watch error; retrying");
                metrics.watch_restarted("karmadaquotareservations");
            }
        }
    }
}
