//! End-to-end test harness for karmada-quota: a real kube-apiserver (1.20.2) and etcd on
//! 127.0.0.1, Karmada's CRDs and ours, the project's real binaries as child processes.
//!
//! ```text
//!  e2e/controlplane/controlplane.sh
//!    install ── apt packages, kube-apiserver built once ──▶ ~/.cache/karmada-quota/
//!    up DIR ───▶ etcd ──┬── apiserver-0  /cluster0  "Karmada control plane" + CRDs
//!                       ├── apiserver-1  /cluster1  member1
//!                       └── apiserver-2  /cluster2  member2
//!                DIR/env, DIR/kubeconfig-<i>, DIR/pids, DIR/logs/
//!                                   ▲
//!  test process ─────────────────────┘
//!    Env::get()   one per process: E2E_KUBECONFIG │ E2E_CONTROLPLANE_DIR │ own `up`
//!                 (own `up` runs with --owner-pid: a watchdog downs it when we exit)
//!      ├─ client() / member_clients()   a fresh kube::Client per test runtime, kube's
//!      │                                 retry layer off (every refusal is seen as given)
//!      ├─ kubectl(&args)                 against apiserver 0
//!      └─ log_dir()                      where Binary logs go
//!    karmada      real Karmada around a test (make e2e-karmada): fixture, readers
//!    chart        charts/karmada-quota through helm and the check tools (hack/tools.sh)
//!    install      an installed chart's pods as loopback processes (Deployments, tokens)
//!    OwnControlPlane  a test's own etcd + apiservers (own flags, older CRDs), down on drop
//!    Service      one loopback address in front of endpoints changed during a rollout
//!    load         steady binding creates, scale-ups and deletes, and the ledger invariants
//!                 (invariant: read per quota, either reservation store) sampled under them
//!    chaos        replicas behind proxies and a seeded fault loop: kills, cuts, apiserver
//!                 restarts (OwnControlPlane::restart_apiserver, etcd kept)
//!    TestNs       a fresh namespace per test (generateName, labelled)
//!    skip         a missing prerequisite fails the test unless allowed by name
//!                 (KQ_ALLOW_SKIP); an allowed one is logged (KQ_SKIP_LOG)
//!    certs        test CAs and certificates (rcgen), fingerprints and subjects read back
//!    attack       raw TLS clients (with/without client certificates), drips, floods of
//!                 held bodies, RSS of a child process
//!    faults       UnservedApi: an API group whose discovery fails (503)
//!    apply_yaml / apply_json / accepts / rejects / wait_for
//!    prometheus   Debian's prometheus on loopback scraping admin ports (usage report)
//!    TestHook     an admission webhook served by the test itself (refuse, act first)
//!    Binary       target/<profile>/karmada-quota-{webhook,controller} as children,
//!                 killed on drop, log tail printed when the test panics;
//!                 wait_admin() polls an admin path (http_get) until it answers 200
//! ```
//!
//! Each `#[tokio::test]` has its own runtime, so nothing here keeps a `kube::Client`
//! across tests: [`Env`] stores configurations and builds clients on demand.
//!
//! The tests in `e2e/tests/` that need the control plane or the chart tools are
//! `#[ignore]`d, so `cargo test` needs neither;
//! `make test` runs them (`--run-ignored all`), and so does
//! `cargo nextest run -p karmada-quota-e2e --run-ignored only`.

mod apply;
pub mod attack;
pub mod base64;
mod binary;
pub mod browser;
pub mod certs;
pub mod chaos;
pub mod chart;
pub mod commands;
pub mod controller;
pub mod dns;
mod env;
pub mod faults;
pub mod image;
pub mod install;
pub mod invariant;
pub mod karmada;
pub mod load;
mod metrics;
mod ns;
pub mod own_controlplane;
mod ports;
pub mod prometheus;
pub mod prometheus_gateway;
pub mod proxy;
pub mod queue;
pub mod quota_status;
pub mod service;
pub mod setup;
pub mod skip;
pub mod test_hook;
pub mod viewer;
mod wait;
pub mod webhook;

pub use apply::{accepts, apply_json, apply_yaml, rejects, resolve, yaml_documents};
pub use binary::{Binary, BinaryBuilder, http_get, http_get_ok, http_get_with, use_bin_dir};
pub use env::{Env, EnvSource, WebhookClientCert};
pub use metrics::metric_sum;
pub use ns::TestNs;
pub use ports::free_port;
pub use quota_status::replace_quota_status;
pub use wait::{try_wait_for, wait_for};

/// Field manager of every server-side apply the harness makes.
pub const FIELD_MANAGER: &str = "karmada-quota-e2e";

/// Label put on every test namespace; its value is the test's name.
pub const TEST_LABEL: &str = "e2e.karmada-quota/test";
