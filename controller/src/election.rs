//! Who leads: the Lease election (or leading alone without it, or never with
//! `--role=dashboard`), and following it — every quota is reconciled on becoming leader,
//! and the leader gauge is kept. Each Lease taken moves the fence first (`crate::fence`).

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fence::Fence;
use crate::leader::{Elector, LeaseSettings};
use crate::metrics::Metrics;
use crate::stop::Stop;
use crate::triggers::Triggers;

/// Leadership as the rest of the controller sees it.
pub(crate) struct Election {
    /// Whether this replica is the leader (always, without leader election).
    pub(crate) leader: watch::Receiver<bool>,
    /// Whether the Lease can be used at all (namespace present, RBAC granted).
    pub(crate) lease_ok: watch::Receiver<bool>,
    /// The elector (it releases the Lease when it ends).
    pub(crate) task: Option<JoinHandle<()>>,
}

/// How this replica leads, as the flags say.
pub(crate) enum Leadership {
    /// Never (`--role=dashboard`): no Lease, no writes.
    Never,
    /// Always, alone (leader election off).
    Alone,
    /// While it holds the Lease.
    Lease(LeaseSettings),
}

/// Start the Lease election (or lead alone) and follow it: every quota is reconciled on
/// becoming leader, and the leader gauge is kept.
pub(crate) fn start(
    leadership: Leadership,
    client: &Client,
    stop: &Stop,
    (triggers, fence): (&Triggers, &Arc<Fence>),
    metrics: &Arc<Metrics>,
) -> Election {
    let fixed = |leads: bool| Election {
        leader: watch::channel(leads).1,
        lease_ok: watch::channel(true).1,
        task: None,
    };
    let election = match leadership {
        Leadership::Never => {
            tracing::info!(
                "--role=dashboard: no Lease, no writes; numbers from the quotas' status"
            );
            fixed(false)
        }
        Leadership::Alone => {
            tracing::info!("leader election disabled: this replica writes status");
            fixed(true)
        }
        Leadership::Lease(settings) => {
            let (elector, leader) = Elector::new(client.clone(), settings);
            let elector = elector.with_fence(fence.clone());
            let lease_ok = elector.lease_ok();
            Election {
                leader,
                lease_ok,
                task: Some(tokio::spawn(elector.run(stop.requested()))),
            }
        }
    };
    tokio::spawn(follow_leadership(
        election.leader.clone(),
        triggers.clone(),
        metrics.clone(),
    ));
    election
}

/// On becoming leader, reconcile every quota at once; export the leader gauge.
async fn follow_leadership(
    mut leader: watch::Receiver<bool>,
    triggers: Triggers,
    metrics: Arc<Metrics>,
) {
    loop {
        let is_leader = *leader.borrow_and_update();
        metrics.set_leader(is_leader);
        if is_leader {
            triggers.all();
        }
        if leader.changed().await.is_err() {
            return;
        }
    }
}
