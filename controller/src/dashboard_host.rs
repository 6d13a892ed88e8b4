//! The dashboard's host: starts the browser dashboard (`crate::dashboard`) on
//! `--dashboard-listen` with what it reads of the controller, through one narrow port
//! ([`Ports`]: the views the reconcilers publish, the members' reach, leadership and the
//! namespaces' teams), and the one watch only it needs (Warning events of quotas), behind
//! `--dashboard-auth`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event as CoreEvent;
use karmada_quota_billing::history::{Bounds, Store as HistoryStore};
use karmada_quota_billing::prometheus_access::PrometheusAccess;
use karmada_quota_dashboard::{Access, CachePolicy};
use karmada_quota_shell::listener::{Limits, TlsFiles};
use kube::{Api, Client};
use parking_lot::RwLock;
use tokio::sync::watch;

use crate::api::Views;
use crate::changes::Changes;
use crate::dashboard::{self, MemberSource, Sources, Warnings};
use crate::dashboard_auth::KubeReviewer;
use crate::members::MemberRegistry;
use crate::namespaces::NamespaceLabels;
use crate::stop::Stop;

/// The dashboard's settings, from the flags.
pub(crate) struct DashboardConfig {
    /// `--dashboard-listen`.
    pub(crate) listen: SocketAddr,
    /// The one namespace whose Warning events are watched (`--namespace`); `None`: all.
    pub(crate) namespace: Option<String>,
    /// This replica measures the members (`--role` all or controller); otherwise their
    /// reach comes from the quotas' status.
    pub(crate) members_measured: bool,
    /// What the dashboard crate takes as it is (its Report page's Prometheus is set here,
    /// from [`DashboardConfig::prometheus`]).
    pub(crate) settings: karmada_quota_dashboard::Settings,
    /// `--dashboard-prometheus` and how to reach it: the Report page's source.
    pub(crate) prometheus: Option<(String, PrometheusAccess)>,
    /// `--dashboard-auth=kubernetes`: TokenReview audiences and the answers' cache policy
    /// (TTL, the rate of reviews of new tokens).
    pub(crate) auth: Option<(Vec<String>, CachePolicy)>,
    /// The listener's bounds and its TLS files.
    pub(crate) listener: (Limits, Option<TlsFiles>),
    /// The in-memory usage history: its bounds and step.
    pub(crate) history: (Bounds, Duration),
}

/// What the dashboard reads of the rest of the controller.
pub(crate) struct Ports {
    /// The views the reconcilers publish.
    pub(crate) views: Views,
    /// The members' reach, as this replica measures it.
    pub(crate) members: MemberRegistry,
    /// Whether this replica leads.
    pub(crate) leader: watch::Receiver<bool>,
    /// The namespaces' labels (teams).
    pub(crate) namespaces: NamespaceLabels,
}

/// Start the dashboard, its Warning event watch and its reviewer; runs until `stop`.
pub(crate) fn spawn(config: DashboardConfig, client: &Client, ports: Ports, stop: &Stop) {
    let DashboardConfig {
        listen,
        namespace,
        members_measured,
        mut settings,
        prometheus,
        auth,
        listener,
        history,
    } = config;
    let sources = Sources {
        views: ports.views,
        members: if members_measured {
            MemberSource::Measured(ports.members)
        } else {
            MemberSource::FromStatus
        },
        leader: ports.leader,
        namespaces: ports.namespaces,
        team_label: settings.team_label.clone(),
        warnings: Warnings::default(),
        warnings_changed: Changes::default(),
    };
    settings.prometheus = prometheus.and_then(|(url, access)| {
        crate::billing_source::page_source(&url, &access)
            .inspect_err(|e| tracing::error!(error = %e, "dashboard Report page off"))
            .ok()
    });
    let events: Api<CoreEvent> = match namespace.as_deref() {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    tokio::spawn(dashboard::watch_warnings(
        events,
        sources.warnings.clone(),
        sources.warnings_changed.clone(),
    ));
    let access = auth.map(|(audiences, policy)| {
        Access::new(
            Arc::new(KubeReviewer::new(client.clone(), audiences)),
            policy,
        )
    });
    let (bounds, step) = history;
    dashboard::spawn(
        listen,
        settings,
        access,
        sources,
        listener,
        stop.requested(),
        (Arc::new(RwLock::new(HistoryStore::new(bounds))), step),
    );
}
