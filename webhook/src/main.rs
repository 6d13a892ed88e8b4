//! `karmada-quota-webhook`: parse flags, build the state, serve HTTPS + admin, stop on
//! SIGTERM. Everything else lives in the library.

use parking_lot::Mutex;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use karmada_quota_shell::{self as shell, Readiness, plurals::PluralResolver};
use karmada_quota_webhook::cache::freshness;
use karmada_quota_webhook::events::{self, EventConfig, EventQueue, KubeEventSink};
use karmada_quota_webhook::ledger::Ledger;
use karmada_quota_webhook::{
    AppState, Args, Batcher, BatcherConfig, Denials, KubeStore, Metrics, QuotaCache, Settings,
    Stores, app, server,
};
use prometheus_client::registry::Registry;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    shell::init_logging(&args.log)?;
    if let Err(refused) = args.check_client_auth() {
        anyhow::bail!("refusing to start: {refused}");
    }
    server::install_crypto_provider();
    let client = shell::client(&args.client).await?;

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    shell::listener::metrics::register(&mut registry);
    let ready = Readiness::default();

    // The quota watches list consistently (R23), start once the batch list is in, list
    // again when a batch re-list asks, and each quota is read from etcd before its first
    // use in a decision (`karmada_quota_webhook::ledger`'s module doc says why).
    let (cache, feed) = QuotaCache::watch(client.clone());
    let (ledger, batch_feed) = Ledger::watch(
        client.clone(),
        &args.reservations.reservation_namespace,
        cache.relists().clone(),
    );
    tokio::spawn(batch_feed);
    let gate = ledger.clone();
    tokio::spawn(async move {
        gate.wait_synced().await;
        feed.await;
    });
    // Ready once synced; unready while a watch has failed past --max-cache-staleness.
    tokio::spawn(freshness::keep_ready(
        cache.clone(),
        ready.clone(),
        args.max_cache_staleness,
        freshness::FreshnessMetrics::register(&mut registry),
    ));

    let batcher = Batcher::with_stores(
        Stores {
            quotas: Arc::new(KubeStore::new(client.clone())),
            cluster_quotas: Arc::new(KubeStore::new(client.clone())),
            ledger,
        },
        cache.clone(),
        metrics.clone(),
        BatcherConfig {
            reservation_ttl: args.reservation_ttl,
            max_reservations: args.max_reservations,
            linger: args.batch_linger,
            unaccounted_default: args.unaccounted_workloads.into(),
            ..BatcherConfig::default()
        },
        Batcher::wall_clock(),
    );
    let events = args.events.then(|| {
        let (queue, rx) = EventQueue::channel(events::QUEUE_CAPACITY, metrics.events.clone());
        tokio::spawn(events::run(
            rx,
            Arc::new(KubeEventSink::new(client.clone())),
            EventConfig {
                interval: args.event_interval,
                qps: args.event_qps,
                burst: args.event_burst,
                instance: reporting_instance(),
                ..EventConfig::new(events::REPORTING_CONTROLLER, "denial event")
            },
            metrics.events.clone(),
        ));
        queue
    });
    let denials = Denials::new(args.denial_log_interval, events, metrics.clone());
    let state = AppState {
        cache,
        batcher,
        plurals: PluralResolver::new(client.clone()),
        metrics: metrics.clone(),
        settings: Settings {
            decision_timeout: args.decision_timeout,
            max_body_bytes: args.max_body_bytes,
            max_policy_body_bytes: args.max_policy_body_bytes,
            max_quota_body_bytes: args.max_quota_body_bytes,
            max_list_items: args.max_list_items,
            decode_budget: karmada_quota_webhook::admission::DecodeBudget::new(
                args.max_decoded_bytes_in_flight,
            ),
            policy_enforcement: args.policy_enforcement,
            policy_max_templates: args.policy_max_templates,
            max_cache_staleness: args.max_cache_staleness,
            quota_admins: karmada_quota_webhook::tenancy::QuotaAdmins::new(
                args.quota_admin_users.clone(),
                args.quota_admin_groups.clone(),
            ),
            pod_less_groups: args.pod_less_groups.clone(),
            queue_releasers: karmada_quota_webhook::tenancy::names(args.queue_releasers.clone()),
        },
        policies: Some(std::sync::Arc::new(
            karmada_quota_webhook::policy::KubePolicyWorld::new(client).with_limits(
                karmada_quota_webhook::policy::TemplateLimits::new(
                    args.policy_list_page_size,
                    args.policy_max_template_bytes,
                    args.policy_template_bytes_in_flight,
                )
                .with_lua_runs(args.policy_max_concurrent_lua),
            ),
        )),
        denials,
    };

    let tls = server::load_tls(args.tls_files())?;
    if tls.client_auth_required() {
        metrics.client_auth_required.set(1);
    } else {
        metrics.client_auth_required.set(0);
        tracing::warn!(
            listen = %args.listen,
            "no --client-ca-file: any client that reaches the admission port can send \
             reviews (forged reviews reserve quota); give the apiserver a client \
             certificate (AdmissionConfiguration kubeConfigFile) and set --client-ca-file"
        );
    }
    tokio::spawn(tls.clone().reload_on_change(args.tls_reload_interval));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };
    tokio::spawn(async move {
        shell::shutdown_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let limits = args.listener.limits();
    let admin = shell::serve_admin(
        args.admin.admin_listen,
        limits,
        shell::admin_router(Arc::new(Mutex::new(registry)), ready),
        stopped(),
    );
    let https = server::serve_https(args.listen, app(state), tls, limits, stopped());
    // Either ending in an error ends the process with it: a webhook whose admin port
    // cannot be bound must not go on serving reviews with no /readyz, /metrics or word
    // of why (the other server is dropped).
    tokio::try_join!(admin, async { https.await.context("admission server") })?;
    Ok(())
}

/// `reportingInstance` of events: `$POD_NAME`, else `$HOSTNAME`, else the controller name.
fn reporting_instance() -> String {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|s| !s.is_empty()))
        .unwrap_or_else(|| events::REPORTING_CONTROLLER.to_owned())
}
