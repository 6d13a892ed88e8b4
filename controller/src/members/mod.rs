//! Member clusters: what their pods actually request.
//!
//! ```text
//!  Cluster objects (apiEndpoint + secretRef) ─┐ discovery::desired_members ─► Members::sync
//!  --member-kubeconfig NAME=PATH ─────────────┘    (start / restart / stop one task each;
//!                                                   a (re)start takes a new registry epoch)
//!  watch::MemberTask per member:  trust::decide (insecureSkipTLSVerification, http://,
//!        │   kubeconfig insecure-skip-tls-verify: refused ─► Unreachable("refused: …"),
//!        │   unless --allow-insecure-members ─► Unverified once listed)
//!        └─► client::config_from_secret / config_from_kubeconfig
//!        └─► watch pods (all namespaces, or --namespace; non-terminal; paginated)
//!              ─► registry::MemberRegistry (epoch-checked) ─► observed::MemberPods: ns → uid → {class, usage}
//!              error ─► Reach::Unreachable, retry with backoff (never a crash)
//!              changes ─► Triggers (only the namespaces touched; all quotas on reach changes)
//! ```
//!
//! A member's pods count as `clusters[].observed` only while it is [`Reach::Reachable`]
//! (or [`Reach::Unverified`]: reachable without TLS verification, allowed);
//! otherwise it is reported in the `MembersReachable` condition and `observed` is omitted.
//!
//! Modules: [`discovery`] (which members), [`trust`] (whether an unverified connection
//! is allowed), [`client`] (their client configuration),
//! [`watch`] (one task per member), [`registry`] (shared state and epochs), [`observed`]
//! (one member's pods), and here [`Members`] (the tasks' supervisor).

pub mod client;
pub mod discovery;
pub mod observed;
pub mod registry;
pub mod trust;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use kube::Client;
use tokio::task::AbortHandle;

pub use client::{SECRET_CA_KEY, SECRET_TOKEN_KEY, config_from_kubeconfig, config_from_secret};
pub use discovery::{MemberKubeconfig, MemberSource, desired_members, parse_member_kubeconfig};
pub use observed::{MemberPods, PodEntry, pod_entry, pod_view};
pub use registry::{Epoch, MemberRegistry, MemberState, Reach};
pub use trust::{AllowInsecure, Trust};

use crate::metrics::Metrics;
use crate::triggers::Triggers;
use watch::MemberTask;

/// How member tasks connect and retry.
#[derive(Clone, Debug)]
pub struct MemberSettings {
    /// TCP connect timeout, the deadline of a probe, and a third of the first list's.
    pub connect_timeout: Duration,
    /// How often a watched member is probed.
    pub probe_interval: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// Watch pods of this namespace only (`--namespace`); `None`: all namespaces.
    pub namespace: Option<String>,
    /// `--allow-insecure-members`: who may be reached without TLS verification.
    pub allow_insecure: AllowInsecure,
}

/// Starts, restarts and stops one watch task per member.
pub struct Members {
    registry: MemberRegistry,
    tasks: Mutex<BTreeMap<String, (MemberSource, AbortHandle)>>,
    control: Client,
    settings: MemberSettings,
    triggers: Triggers,
    metrics: Arc<Metrics>,
}

impl Members {
    /// A manager with no members yet.
    pub fn new(
        registry: MemberRegistry,
        control: Client,
        settings: MemberSettings,
        triggers: Triggers,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            registry,
            tasks: Mutex::new(BTreeMap::new()),
            control,
            settings,
            triggers,
            metrics,
        }
    }

    /// Make the running member tasks match `desired` (new ones started, changed ones
    /// restarted, removed ones stopped and forgotten).
    pub fn sync(&self, desired: &BTreeMap<String, MemberSource>) {
        let mut tasks = self.tasks.lock();
        let mut changed = false;
        tasks.retain(|name, (source, handle)| {
            let keep = desired.get(name) == Some(source);
            if !keep {
                tracing::info!(member = %name, "stopping member watch");
                handle.abort();
                self.registry.remove(name);
                self.metrics.remove_member(name);
                changed = true;
            }
            keep
        });
        for (name, source) in desired {
            if tasks.contains_key(name) {
                continue;
            }
            tracing::info!(member = %name, ?source, "starting member watch");
            let task = MemberTask {
                name: name.clone(),
                epoch: self.registry.start(name),
                source: source.clone(),
                registry: self.registry.clone(),
                control: self.control.clone(),
                settings: self.settings.clone(),
                triggers: self.triggers.clone(),
                metrics: self.metrics.clone(),
            };
            let handle = tokio::spawn(task.run()).abort_handle();
            tasks.insert(name.clone(), (source.clone(), handle));
            changed = true;
        }
        if changed {
            self.triggers.all();
        }
    }

    /// Stop every member task.
    pub fn stop(&self) {
        let mut tasks = self.tasks.lock();
        for (_, (_, handle)) in std::mem::take(&mut *tasks) {
            handle.abort();
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        self.stop();
    }
}
