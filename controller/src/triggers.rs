//! Reconcile requests from outside the quota watch: binding and member-pod changes name
//! namespaces (only their quotas are reconciled); member reachability changes and a new
//! leader ask for every quota.

use futures::channel::mpsc;

/// The sending side, cloned into every producer.
#[derive(Clone, Debug)]
pub struct Triggers {
    namespaces: mpsc::UnboundedSender<String>,
    all: mpsc::UnboundedSender<()>,
}

/// The receiving side, consumed by the controller.
#[derive(Debug)]
pub struct TriggerStreams {
    /// Namespaces whose quotas must be reconciled.
    pub namespaces: mpsc::UnboundedReceiver<String>,
    /// Reconcile every quota.
    pub all: mpsc::UnboundedReceiver<()>,
}

/// A connected pair.
pub fn triggers() -> (Triggers, TriggerStreams) {
    let (ns_tx, ns_rx) = mpsc::unbounded();
    let (all_tx, all_rx) = mpsc::unbounded();
    (
        Triggers {
            namespaces: ns_tx,
            all: all_tx,
        },
        TriggerStreams {
            namespaces: ns_rx,
            all: all_rx,
        },
    )
}

impl Triggers {
    /// Reconcile the quotas of these namespaces.
    pub fn namespaces(&self, namespaces: impl IntoIterator<Item = String>) {
        for ns in namespaces {
            // Closed only when the controller is shutting down.
            let _ = self.namespaces.unbounded_send(ns);
        }
    }

    /// Reconcile every quota.
    pub fn all(&self) {
        let _ = self.all.unbounded_send(());
    }
}
