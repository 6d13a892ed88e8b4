//! The listeners' saturation, counted: process-wide families every listener of the binary
//! counts into (labelled by the listener's name), which the binary registers into its
//! registry with [`register`]. They say when a listener is saturated, where readiness
//! deliberately does not (see the module doc of `listener`).

use std::sync::OnceLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `kq_listener_pending_evicted_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ListenerLabels {
    /// `admission webhook`, `admin`, `dashboard`.
    pub listener: &'static str,
}

/// Labels of `kq_listener_connections_refused_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusedLabels {
    /// The listener.
    pub listener: &'static str,
    /// `peer_full` (--max-connections-per-peer, all established) or `full` (every slot
    /// established).
    pub reason: &'static str,
}

#[derive(Default)]
struct Families {
    evicted: Family<ListenerLabels, Counter>,
    refused: Family<RefusedLabels, Counter>,
}

fn families() -> &'static Families {
    static FAMILIES: OnceLock<Families> = OnceLock::new();
    FAMILIES.get_or_init(Families::default)
}

/// Register the listeners' families into `registry` (prefix `kq_listener`).
pub fn register(registry: &mut Registry) {
    let reg = registry.sub_registry_with_prefix("kq_listener");
    reg.register(
        "pending_evicted",
        "Connections evicted before their TLS handshake (plain: their first byte) for a newer one",
        families().evicted.clone(),
    );
    reg.register(
        "connections_refused",
        "New connections closed at once: every slot of the listener, or of the source IP, established",
        families().refused.clone(),
    );
}

pub(super) fn evicted(listener: &'static str) {
    families()
        .evicted
        .get_or_create(&ListenerLabels { listener })
        .inc();
}

pub(super) fn refused(listener: &'static str, reason: &'static str) {
    families()
        .refused
        .get_or_create(&RefusedLabels { listener, reason })
        .inc();
}

/// Evictions counted for `listener` so far (tests).
#[cfg(test)]
pub(super) fn evicted_count(listener: &'static str) -> u64 {
    families()
        .evicted
        .get_or_create(&ListenerLabels { listener })
        .get()
}
