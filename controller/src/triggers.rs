//! Reconcile requests from outside the quota watch: binding and member-pod changes name
//! namespaces (only their quotas are reconciled); member reachability changes and a new
//! leader ask for every quota. Each request goes to both controllers: the KarmadaQuota
//! one and the KarmadaClusterQuota one (which reconciles the cluster quotas selecting a
//! named namespace).

use futures::channel::mpsc;

/// The sending side, cloned into every producer.
#[derive(Clone, Debug)]
pub struct Triggers {
    namespaces: mpsc::UnboundedSender<String>,
    all: mpsc::UnboundedSender<()>,
    cluster_namespaces: mpsc::UnboundedSender<String>,
    cluster_all: mpsc::UnboundedSender<()>,
}

/// The receiving side, consumed by the controller.
#[derive(Debug)]
pub struct TriggerStreams {
    /// Namespaces whose quotas must be reconciled.
    pub namespaces: mpsc::UnboundedReceiver<String>,
    /// Reconcile every quota.
    pub all: mpsc::UnboundedReceiver<()>,
    /// Namespaces whose cluster quotas must be reconciled.
    pub cluster_namespaces: mpsc::UnboundedReceiver<String>,
    /// Reconcile every cluster quota.
    pub cluster_all: mpsc::UnboundedReceiver<()>,
}

/// A connected pair.
pub fn triggers() -> (Triggers, TriggerStreams) {
    let (ns_tx, ns_rx) = mpsc::unbounded();
    let (all_tx, all_rx) = mpsc::unbounded();
    let (cns_tx, cns_rx) = mpsc::unbounded();
    let (call_tx, call_rx) = mpsc::unbounded();
    (
        Triggers {
            namespaces: ns_tx,
            all: all_tx,
            cluster_namespaces: cns_tx,
            cluster_all: call_tx,
        },
        TriggerStreams {
            namespaces: ns_rx,
            all: all_rx,
            cluster_namespaces: cns_rx,
            cluster_all: call_rx,
        },
    )
}

impl TriggerStreams {
    /// The KarmadaQuota controller's streams (the cluster ones closed).
    pub fn namespaced(
        namespaces: mpsc::UnboundedReceiver<String>,
        all: mpsc::UnboundedReceiver<()>,
    ) -> Self {
        Self {
            namespaces,
            all,
            cluster_namespaces: mpsc::unbounded().1,
            cluster_all: mpsc::unbounded().1,
        }
    }
}

impl Triggers {
    /// Reconcile the quotas of these namespaces.
    pub fn namespaces(&self, namespaces: impl IntoIterator<Item = String>) {
        for ns in namespaces {
            // Closed only when the controller is shutting down (or, for cluster quotas,
            // when this controller does not reconcile them).
            let _ = self.cluster_namespaces.unbounded_send(ns.clone());
            let _ = self.namespaces.unbounded_send(ns);
        }
    }

    /// Reconcile every quota.
    pub fn all(&self) {
        let _ = self.all.unbounded_send(());
        self.cluster_all();
    }

    /// Reconcile every cluster quota (a namespace's labels changed).
    pub fn cluster_all(&self) {
        let _ = self.cluster_all.unbounded_send(());
    }
}
