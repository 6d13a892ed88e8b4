//! The admission webhook under test: certificates, the process, its registration, and the
//! objects and status helpers its e2e tests share.
//!
//! ```text
//!  WebhookTls::get(env)      once per process: certs → <cp dir>/webhook-tls-<pid>/
//!       │                    ca.pem (caBundle), tls.pem + tls.key (SAN IP:127.0.0.1);
//!       │                    WebhookTls::generate_as(dir, label, serial): another pair
//!       │                    (rotation tests serve their own copies: tls_files(cert, key),
//!       │                    Registration::register_with_ca; served_fingerprint(addr))
//!       ▼
//!  Webhook::start(env)       target/<profile>/karmada-quota-webhook
//!       │                      --listen 127.0.0.1:<free> --admin-listen 127.0.0.1:<free>
//!       │                      --kubeconfig <apiserver 0> --tls-cert-file/--tls-private-key-file
//!       │                    ready when GET /readyz on the admin port answers 200
//!       ▼
//!  Registration::register    ValidatingWebhookConfiguration from
//!       │                    webhook/manifests/validatingwebhookconfiguration.yaml, url =
//!       │                    https://127.0.0.1:<port>, caBundle, name kq-e2e-<ns>,
//!       │                    namespaceSelector {e2e.karmada-quota/webhook: kq-e2e-<ns>}
//!       │                    (the label is put on the test's namespaces only, so parallel
//!       │                    tests never see each other's webhooks); returns once the
//!       │                    apiserver really calls it (a dry-run probe moves the webhook's
//!       │                    decision counter); deleted by cleanup() or on drop
//!       ▼
//!  tests: Env::client() (kube's retry layer off: every refusal is seen as given),
//!         quota()/Rb builders, seed_used() (status.used "as the controller would"),
//!         create()/update() returning the apiserver's refusal, quota_usage(),
//!         wait_until_status_seen(), proxy::TcpProxy::round_robin (two webhooks behind
//!         one URL),
//!         review_client()/binding_review()/post_review() (reviews straight to a webhook,
//!         also used by the `kq-load` bench tool)
//! ```
//!
//! Without a controller nothing fills `status.used`, and the webhook answers
//! `status unknown` to every increase: tests that need a synced quota call [`seed_used`].
//!
//! One idea a file: `tls` (certificates, fingerprints), `process` (the binary and its
//! admin port), `review` (AdmissionReviews straight to it), `registration` (the
//! configuration and the webhooks' names), `objects` (bindings and quotas to send),
//! `outcome` (a create or update and its refusal), `status` (seeding and reading a
//! quota's status). Every name is re-exported here, so tests use `webhook::…`.

mod objects;
mod outcome;
mod process;
mod registration;
mod review;
mod status;
mod tls;

pub use objects::{Rb, binding_resource, bindings, quota, quota_scoped};
pub use outcome::{Outcome, create, create_with, expect_admitted, expect_refused, update};
pub use process::{READY_TIMEOUT, TEST_RESERVATION_TTL, WEBHOOK_BIN, Webhook, WebhookBuilder};
pub use registration::{
    BINDING_WEBHOOK, CLUSTER_QUOTA_WEBHOOK, NS_LABEL, QUOTA_WEBHOOK, Registration, VWC_MANIFEST,
    binding_denied, quota_denied, vwc_from_manifest, wait_called,
};
pub use review::{binding_review, post_review, review_client, review_client_as};
pub use status::{
    QuotaUsage, quota_usage, seed_used, unfolded_entries, wait_until_dry_run_refused,
    wait_until_status_seen,
};
pub use tls::{WebhookTls, cert_fingerprint, served_fingerprint};

/// Also here, beside the webhook fixtures whose metrics it reads.
pub use crate::metrics::metric_sum;
