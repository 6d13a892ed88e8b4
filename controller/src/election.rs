//! Who leads: the Lease election (or leading alone without it, or never with
//! `--role=dashboard`), and following it — every quota is reconciled on becoming leader,
//! and the leader gauge is kept.

use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Stop;
use crate::args::Args;
use crate::leader::{Elector, LeaseSettings};
use crate::metrics::Metrics;
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

/// Start the Lease election (or lead alone) and follow it: every quota is reconciled on
/// becoming leader, and the leader gauge is kept.
pub(crate) fn start(
    args: &Args,
    client: &Client,
    stop: &Stop,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
) -> Election {
    let election = if !args.controls() {
        tracing::info!("--role=dashboard: no Lease, no writes; numbers from the quotas' status");
        Election {
            leader: watch::channel(false).1,
            lease_ok: watch::channel(true).1,
            task: None,
        }
    } else if args.leader_election_enabled() {
        let (elector, leader) = Elector::new(
            client.clone(),
            LeaseSettings {
                namespace: args.lease_namespace.clone(),
                name: args.lease_name.clone(),
                identity: args.identity(),
                duration: args.lease_duration,
                renew_interval: args.lease_renew_interval,
            },
        );
        let lease_ok = elector.lease_ok();
        Election {
            leader,
            lease_ok,
            task: Some(tokio::spawn(elector.run(stop.requested()))),
        }
    } else {
        tracing::info!("leader election disabled: this replica writes status");
        Election {
            leader: watch::channel(true).1,
            lease_ok: watch::channel(true).1,
            task: None,
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
