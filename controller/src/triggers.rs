//! Reconcile requests from outside the quota watch: binding and member-pod changes name
//! namespaces (only their quotas are reconciled); member reachability changes and a new
//! leader ask for every quota. Each request goes to both controllers: the KarmadaQuota
//! one and the KarmadaClusterQuota one (which reconciles the cluster quotas selecting a
//! named namespace). A reservation batch names its quotas one by one: each goes to the
//! controller of its kind.

use futures::channel::mpsc;
use karmada_quota_core::selection::QuotaKey;

/// The sending side, cloned into every producer.
#[derive(Clone, Debug)]
pub struct Triggers {
    namespaces: mpsc::UnboundedSender<String>,
    all: mpsc::UnboundedSender<()>,
    cluster_namespaces: mpsc::UnboundedSender<String>,
    cluster_all: mpsc::UnboundedSender<()>,
    quotas: mpsc::UnboundedSender<(String, String)>,
    cluster_quotas: mpsc::UnboundedSender<String>,
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
    /// KarmadaQuotas (namespace, name) to reconcile.
    pub quotas: mpsc::UnboundedReceiver<(String, String)>,
    /// KarmadaClusterQuotas (name) to reconcile.
    pub cluster_quotas: mpsc::UnboundedReceiver<String>,
}

/// A connected pair.
pub fn triggers() -> (Triggers, TriggerStreams) {
    let (ns_tx, ns_rx) = mpsc::unbounded();
    let (all_tx, all_rx) = mpsc::unbounded();
    let (cns_tx, cns_rx) = mpsc::unbounded();
    let (call_tx, call_rx) = mpsc::unbounded();
    let (q_tx, q_rx) = mpsc::unbounded();
    let (cq_tx, cq_rx) = mpsc::unbounded();
    (
        Triggers {
            namespaces: ns_tx,
            all: all_tx,
            cluster_namespaces: cns_tx,
            cluster_all: call_tx,
            quotas: q_tx,
            cluster_quotas: cq_tx,
        },
        TriggerStreams {
            namespaces: ns_rx,
            all: all_rx,
            cluster_namespaces: cns_rx,
            cluster_all: call_rx,
            quotas: q_rx,
            cluster_quotas: cq_rx,
        },
    )
}

impl TriggerStreams {
    /// The KarmadaQuota controller's streams (the cluster ones closed).
    pub fn namespaced(
        namespaces: mpsc::UnboundedReceiver<String>,
        all: mpsc::UnboundedReceiver<()>,
        quotas: mpsc::UnboundedReceiver<(String, String)>,
    ) -> Self {
        Self {
            namespaces,
            all,
            cluster_namespaces: mpsc::unbounded().1,
            cluster_all: mpsc::unbounded().1,
            quotas,
            cluster_quotas: mpsc::unbounded().1,
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

    /// Reconcile these quotas (a reservation batch names them), each by the controller of
    /// its kind.
    pub fn quotas<'a>(&self, keys: impl IntoIterator<Item = &'a QuotaKey>) {
        for key in keys {
            // Closed only when the controller of that kind is shutting down or not run.
            match key {
                QuotaKey::Namespaced { namespace, name } => {
                    let _ = self
                        .quotas
                        .unbounded_send((namespace.clone(), name.clone()));
                }
                QuotaKey::Cluster { name } => {
                    let _ = self.cluster_quotas.unbounded_send(name.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    /// A batch naming a KarmadaQuota and a KarmadaClusterQuota reconciles each by the
    /// controller of its kind, and nothing else.
    #[tokio::test]
    async fn named_quotas_go_to_the_controller_of_their_kind() {
        let (t, mut s) = triggers();
        t.quotas(&[
            QuotaKey::Namespaced {
                namespace: "team-a".into(),
                name: "q".into(),
            },
            QuotaKey::Cluster {
                name: "business-a".into(),
            },
        ]);
        drop(t);
        assert_eq!(
            s.quotas.next().await,
            Some(("team-a".to_owned(), "q".to_owned()))
        );
        assert_eq!(s.cluster_quotas.next().await, Some("business-a".to_owned()));
        assert_eq!(s.quotas.next().await, None);
        assert_eq!(s.cluster_quotas.next().await, None);
        assert_eq!(
            s.namespaces.next().await,
            None,
            "no namespace-wide reconcile"
        );
        assert_eq!(s.cluster_all.next().await, None);
    }
}
