//! One member's watch task: configure, list and watch its pods page by page, probe it, report reach; retried with backoff.
//!
//! ```text
//!  loop: trust (not verified and not allowed ─► Unreachable("refused: …"), backoff; for a
//!        Cluster decided before its Secret is read, so its token is never fetched or sent)
//!        config (Secret → token + caBundle, or kubeconfig)   error ─► Unreachable, backoff
//!          └─► watch pods (non-terminal, pages of MEMBER_PAGE_SIZE)
//!                Init … InitApply … (progress logged every PROGRESS_EVERY pods) … InitDone ─► Reachable
//!                                                         (Unverified when allowed insecure)
//!                every probe interval: GET /version on the member   (fails ─► Unreachable)
//!                                      GET its Secret on the control plane
//!                                      (resourceVersion changed ─► restart with the new one)
//!                list/watch start failed ─► Unreachable, backoff;  stream broke ─► re-list
//! ```
//!
//! The first list has no deadline: a member with many pods takes as long as it takes, and
//! the probes tell a slow list from a dead member. Every registry write carries the task's
//! [`Epoch`], so a task aborted by a restart can never feed the new task's state.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use karmada_quota_shell::backoff::Backoff;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};

use crate::error::Error;
use crate::members::MemberSettings;
use crate::members::client::{config_from_kubeconfig, config_from_secret};
use crate::members::discovery::MemberSource;
use crate::members::registry::{Epoch, MemberRegistry, Reach};
use crate::members::trust::{self, Trust};
use crate::metrics::Metrics;
use crate::triggers::Triggers;

/// Pods in these phases use nothing; the watch leaves them out server-side.
const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";
/// After this many failed attempts in a row the member's configuration is rebuilt (the
/// Secret may have been rotated).
const REBUILD_AFTER_FAILURES: u32 = 3;
/// Pods per list page: a member with many pods is listed in pages (the apiserver keeps
/// each response small), not in one response that may time out.
pub const MEMBER_PAGE_SIZE: u32 = 500;
/// The first list logs its progress every this many pods.
const PROGRESS_EVERY: usize = 5_000;

/// A member's first wait after a failure (doubled per failure in a row, up to
/// `--member-max-backoff`), and the wait before re-listing after a broken stream.
const RETRY_MIN: Duration = Duration::from_secs(1);

/// One member's watch task.
pub(crate) struct MemberTask {
    pub(crate) name: String,
    pub(crate) epoch: Epoch,
    pub(crate) source: MemberSource,
    pub(crate) registry: MemberRegistry,
    pub(crate) control: Client,
    pub(crate) settings: MemberSettings,
    pub(crate) triggers: Triggers,
    pub(crate) metrics: Arc<Metrics>,
}

/// Why one watch attempt ended.
enum Ended {
    /// The member could not be reached (or configured): mark it unreachable.
    Unreachable(String),
    /// The stream broke after working; re-list at once.
    Broken,
    /// The member's Secret changed: build the configuration again and re-list at once.
    SecretChanged,
}

/// A member's client configuration and the resourceVersion of the Secret it came from.
struct Configured {
    config: kube::Config,
    secret_version: Option<String>,
    /// Why its connection is not verified, when `--allow-insecure-members` allows that.
    unverified: Option<String>,
}

/// Why a member has no configuration.
enum Unconfigured {
    /// Its connection would not be verified and it is not allowed: why.
    Refused(String),
    /// Its Secret or kubeconfig cannot be read or used.
    Failed(Error),
}

impl From<Error> for Unconfigured {
    fn from(e: Error) -> Self {
        Unconfigured::Failed(e)
    }
}

/// Where a Cluster asks to skip verification.
const CLUSTER_SKIP: &str = "spec.insecureSkipTLSVerification of its Cluster";
/// Where a kubeconfig asks to skip verification.
const KUBECONFIG_SKIP: &str = "insecure-skip-tls-verify of its kubeconfig";

impl MemberTask {
    pub(crate) async fn run(self) {
        let mut backoff = Backoff::new(RETRY_MIN, self.settings.max_backoff);
        let mut failures = 0_u32;
        let mut configured: Option<Configured> = None;
        let mut told_unverified: Option<String> = None;
        loop {
            if configured.is_none() || failures >= REBUILD_AFTER_FAILURES {
                failures = failures.min(REBUILD_AFTER_FAILURES - 1);
                match self.configure().await {
                    Some(c) => configured = Some(c),
                    None => {
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue;
                    }
                }
            }
            let Some(c) = configured.as_ref() else {
                continue;
            };
            self.tell_unverified(c, &mut told_unverified);
            let ended = match Client::try_from(c.config.clone()) {
                Ok(client) => {
                    self.watch(
                        client,
                        c.secret_version.as_deref(),
                        c.unverified.as_deref(),
                        &mut backoff,
                    )
                    .await
                }
                Err(e) => Ended::Unreachable(format!("cannot build a client: {e}")),
            };
            self.metrics.watch_restarted(&format!("pods/{}", self.name));
            match ended {
                Ended::Unreachable(e) => {
                    failures += 1;
                    self.unreachable(e);
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Ended::Broken => {
                    failures = 0;
                    tokio::time::sleep(RETRY_MIN).await;
                }
                Ended::SecretChanged => {
                    tracing::info!(member = %self.name, "member Secret changed; watching again with it");
                    failures = 0;
                    configured = None;
                }
            }
        }
    }

    /// The member's configuration; `None`: refused or failed, and reported so.
    async fn configure(&self) -> Option<Configured> {
        match self.config().await {
            Ok(c) => Some(c),
            Err(Unconfigured::Refused(why)) => {
                self.refused(why);
                None
            }
            Err(Unconfigured::Failed(e)) => {
                self.unreachable(e.to_string());
                None
            }
        }
    }

    /// Warn that the member is reached without TLS verification, once per reason
    /// (`told`: the reason last warned of).
    fn tell_unverified(&self, c: &Configured, told: &mut Option<String>) {
        if c.unverified.is_some() && c.unverified != *told {
            tracing::warn!(
                member = %self.name,
                why = c.unverified.as_deref().unwrap_or_default(),
                "member cluster {} is reached WITHOUT TLS verification, as --allow-insecure-members allows",
                self.name
            );
            told.clone_from(&c.unverified);
        }
    }

    async fn config(&self) -> Result<Configured, Unconfigured> {
        match &self.source {
            MemberSource::Kubeconfig(path) => {
                let config =
                    config_from_kubeconfig(&self.name, path, self.settings.connect_timeout).await?;
                let unverified = self.trust(
                    &config.cluster_url.to_string(),
                    config.accept_invalid_certs,
                    KUBECONFIG_SKIP,
                )?;
                Ok(Configured {
                    config,
                    secret_version: None,
                    unverified,
                })
            }
            MemberSource::Cluster {
                endpoint, insecure, ..
            } => {
                // Decided before the Secret is read: a refused member's token is never
                // fetched, let alone sent.
                let unverified = self.trust(endpoint, *insecure, CLUSTER_SKIP)?;
                let secret = self.secret().await?;
                Ok(Configured {
                    config: config_from_secret(
                        &self.name,
                        endpoint,
                        &secret,
                        *insecure,
                        self.settings.connect_timeout,
                    )?,
                    secret_version: secret.resource_version(),
                    unverified,
                })
            }
        }
    }

    /// [`trust::decide`] for this member: why it is not verified (allowed), or refused.
    fn trust(
        &self,
        endpoint: &str,
        skip_verify: bool,
        source: &str,
    ) -> Result<Option<String>, Unconfigured> {
        match trust::decide(
            &self.name,
            endpoint,
            skip_verify,
            source,
            &self.settings.allow_insecure,
        ) {
            Trust::Verified => Ok(None),
            Trust::Unverified(why) => Ok(Some(why)),
            Trust::Refused(why) => Err(Unconfigured::Refused(why)),
        }
    }

    /// The member's Secret on the control plane (Cluster sources only).
    async fn secret(&self) -> Result<Secret, Error> {
        let MemberSource::Cluster {
            secret_namespace,
            secret_name,
            ..
        } = &self.source
        else {
            return Err(Error::MemberConfig {
                cluster: self.name.clone(),
                message: "configured by kubeconfig, not by a Secret".to_owned(),
            });
        };
        let api: Api<Secret> = Api::namespaced(self.control.clone(), secret_namespace);
        api.get(secret_name).await.map_err(|e| Error::MemberConfig {
            cluster: self.name.clone(),
            message: format!("cannot read Secret {secret_namespace}/{secret_name}: {e}"),
        })
    }

    /// One probe: the member answers `/version`, and its Secret (if any) is the one the
    /// client was built from. `Some` ends the watch.
    async fn probe(&self, client: &Client, secret_version: Option<&str>) -> Option<Ended> {
        let timeout = self.settings.connect_timeout;
        match tokio::time::timeout(timeout, client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Some(Ended::Unreachable(format!("probe failed: {e}"))),
            Err(_) => {
                return Some(Ended::Unreachable(format!(
                    "probe got no answer within {}s",
                    timeout.as_secs()
                )));
            }
        }
        let current = secret_version?;
        match tokio::time::timeout(timeout, self.secret()).await {
            Ok(Ok(s)) if s.resource_version().as_deref() != Some(current) => {
                Some(Ended::SecretChanged)
            }
            Ok(Err(e)) => {
                // The control plane is not the member: keep watching with what we have.
                tracing::debug!(member = %self.name, error = %e, "cannot re-read the member Secret");
                None
            }
            _ => None,
        }
    }

    /// Watch the member's pods until the watch fails, the member stops answering probes,
    /// or its Secret changes.
    async fn watch(
        &self,
        client: Client,
        secret_version: Option<&str>,
        unverified: Option<&str>,
        backoff: &mut Backoff,
    ) -> Ended {
        let listed_reach =
            unverified.map_or(Reach::Reachable, |why| Reach::Unverified(why.to_owned()));
        let api: Api<Pod> = match &self.settings.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        // Paginated, consistent lists (not `any_semantic`: an apiserver serving
        // resourceVersion=0 from its cache may ignore the page size).
        let wc = watcher::Config::default()
            .fields(NON_TERMINAL_PODS)
            .page_size(MEMBER_PAGE_SIZE);
        let mut stream = watcher(api, wc).boxed();
        let mut listed = 0_usize;
        let mut probe = tokio::time::interval(self.settings.probe_interval);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        probe.tick().await; // the first tick is immediate; the watch's list is the first probe
        loop {
            let next = tokio::select! {
                next = stream.next() => next,
                _ = probe.tick() => match self.probe(&client, secret_version).await {
                    Some(ended) => return ended,
                    None => continue,
                },
            };
            match next {
                None => return Ended::Broken,
                Some(Ok(ev)) => self.apply(&ev, &mut listed, &listed_reach, backoff),
                // 410 Gone and other server-side watch errors: the watcher re-lists itself.
                Some(Err(watcher::Error::WatchError(status))) => {
                    tracing::debug!(member = %self.name, %status, "member watch error, re-listing");
                }
                Some(Err(
                    e
                    @ (watcher::Error::InitialListFailed(_) | watcher::Error::WatchStartFailed(_)),
                )) => {
                    return Ended::Unreachable(e.to_string());
                }
                Some(Err(e)) => {
                    tracing::info!(member = %self.name, error = %e, "member watch broke, re-listing");
                    return Ended::Broken;
                }
            }
        }
    }

    /// Apply one pod event (`listed`: pods listed so far): the registry learns it, the
    /// namespaces it touched are reconciled; the list done, the member is `listed_reach`
    /// and every quota is reconciled.
    fn apply(
        &self,
        ev: &Event<Pod>,
        listed: &mut usize,
        listed_reach: &Reach,
        backoff: &mut Backoff,
    ) {
        match ev {
            Event::Init => *listed = 0,
            Event::InitApply(_) => {
                *listed += 1;
                if listed.is_multiple_of(PROGRESS_EVERY) {
                    tracing::info!(member = %self.name, pods = *listed, "member {}: listed {} pods so far", self.name, *listed);
                }
            }
            _ => {}
        }
        let touched = self.registry.apply_pod_event(&self.name, self.epoch, ev);
        if matches!(ev, Event::InitDone) {
            backoff.reset();
            if self
                .registry
                .set_reach(&self.name, self.epoch, listed_reach.clone())
            {
                tracing::info!(member = %self.name, pods = *listed, "member reachable, pods listed");
                self.metrics.set_member_reachable(&self.name, true);
                self.triggers.all();
            }
        }
        self.triggers.namespaces(touched);
    }

    /// The member is refused (see [`trust`]): unreachable with why, logged once per change.
    fn refused(&self, why: String) {
        if self
            .registry
            .set_reach(&self.name, self.epoch, Reach::Unreachable(why.clone()))
        {
            tracing::warn!(member = %self.name, %why, "member cluster {} refused: its connection would not be verified", self.name);
            self.metrics.set_member_reachable(&self.name, false);
            self.triggers.all();
        } else {
            tracing::debug!(member = %self.name, %why, "member cluster still refused");
        }
    }

    fn unreachable(&self, error: String) {
        if self
            .registry
            .set_reach(&self.name, self.epoch, Reach::Unreachable(error.clone()))
        {
            tracing::warn!(member = %self.name, %error, "member cluster unreachable; retrying with backoff");
            self.metrics.set_member_reachable(&self.name, false);
            self.triggers.all();
        } else {
            tracing::debug!(member = %self.name, %error, "member cluster still unreachable");
        }
    }
}
