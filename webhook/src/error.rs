//! The webhook library's one error type (none of its variants ever turns into an
//! "allowed"), its `Result`, and how errors name a quota object. Every module reads them
//! from here, so none imports the crate root.

use karmada_quota_status::StoreError;

use crate::cache;

/// Errors of the webhook library. None of them ever turns into an "allowed".
///
/// `Clone`: one failed write or read fails every request of its batch, each with the same
/// cause (the I/O errors are shared behind an `Arc`).
#[derive(Clone, Debug, thiserror::Error)]
pub enum Error {
    /// No decision within `--decision-timeout`.
    #[error("no quota decision within the decision timeout")]
    Timeout,

    /// A quota object's API call failed.
    #[error("{}: {source}", quota_ref(namespace, name))]
    Store {
        /// Namespace of the quota.
        namespace: String,
        /// Name of the quota.
        name: String,
        /// What the API said.
        #[source]
        source: StoreError,
    },

    /// A quota in the namespace cannot be parsed or validated, so it cannot be enforced;
    /// requests in its namespace are refused until it is fixed (never silently skipped).
    #[error("{} cannot be enforced: {errors}", quota_ref(namespace, name))]
    InvalidQuota {
        /// Namespace of the quota (empty for a KarmadaClusterQuota).
        namespace: String,
        /// Name of the quota.
        name: String,
        /// Its field errors, joined with `; `.
        errors: String,
    },

    /// The template's kind could not be resolved to a resource plural while a quota in
    /// the namespace counts objects of its API group.
    #[error(
        "cannot count {kind} ({api_version}) for KarmadaQuota {namespace}/{quota}: the \
         resource plural of this kind is unknown (API discovery failed or the kind is not \
         served); retry"
    )]
    UnknownPlural {
        /// Template apiVersion.
        api_version: String,
        /// Template kind.
        kind: String,
        /// Namespace.
        namespace: String,
        /// The quota that counts objects of that group.
        quota: String,
    },

    /// A reservation batch API call failed.
    #[error("KarmadaQuotaReservation {namespace}/{name}: {source}")]
    Batch {
        /// The batches' namespace.
        namespace: String,
        /// The batch.
        name: String,
        /// What the API said.
        #[source]
        source: StoreError,
    },

    /// Every attempt to create the next reservation batch found its number taken.
    #[error(
        "the next reservation batch in {namespace} was taken by another writer {attempts} \
         times in a row; retry"
    )]
    BatchContended {
        /// The batches' namespace.
        namespace: String,
        /// Attempts made.
        attempts: u32,
    },

    /// A reservation batch does not parse, so its entries cannot be counted: every
    /// admission is refused until it is fixed or deleted.
    #[error(
        "KarmadaQuotaReservation {namespace}/{name} cannot be counted: {errors}; fix or delete it"
    )]
    InvalidBatch {
        /// The batches' namespace.
        namespace: String,
        /// The batch.
        name: String,
        /// Its field errors.
        errors: String,
    },

    /// The batch watch re-listed and found batches created and deleted while it was down:
    /// their entries count only once the quota watches listed again (`crate::ledger`).
    #[error(
        "{batches} KarmadaQuotaReservation(s) in {namespace} were created and deleted while \
         this webhook's batch watch was down; the quotas are being read again so that their \
         reservations count; retry"
    )]
    BatchesUnseen {
        /// The batches' namespace.
        namespace: String,
        /// How many numbers the re-list found unseen.
        batches: u64,
    },

    /// A quota covering the request holds no reservation-store fence covering its `hard`
    /// yet (core's `fence`; docs/reservations.md R22), so a webhook of 0.2.0's status
    /// store may still write entries the batches do not see. The controller writes the
    /// fence.
    #[error(
        "{} has no reservation-store fence yet: the controller writes it into the \
         quota's status, and until then webhooks of 0.2.0 (status store) may still admit \
         against it; retry",
        quota_label(namespace, name)
    )]
    StoreNotFenced {
        /// The quota's namespace (empty: a KarmadaClusterQuota).
        namespace: String,
        /// The quota.
        name: String,
    },

    /// The batch watch is down (failed, its re-list not in yet): the view may be behind,
    /// and the next number may be one a batch used and freed (`crate::ledger`).
    #[error(
        "the watch of the KarmadaQuotaReservations in {namespace} is re-listing after a \
         failure; retry"
    )]
    BatchWatchDown {
        /// The batches' namespace.
        namespace: String,
    },

    /// A quota shows a fold of a batch newer than any this webhook's batch view holds:
    /// the view is behind, and the next number may be a used and deleted one.
    #[error(
        "a quota shows KarmadaQuotaReservations in {namespace} folded through \
         {folded_through}, but this webhook has seen them only up to {newest}; its batch \
         watch is behind; retry"
    )]
    BatchesBehind {
        /// The batches' namespace.
        namespace: String,
        /// The newest fold a quota of the decision shows.
        folded_through: u64,
        /// The newest batch this webhook has seen (0: none).
        newest: u64,
    },

    /// A batch was created, but this webhook's batch watch did not show it first of its
    /// number (a watch that lagged; a re-list; the deadline): withdrawn (`crate::ledger`).
    #[error(
        "KarmadaQuotaReservation {namespace}/{name} was created, but this webhook's batch \
         watch {why}; withdrawn; retry"
    )]
    BatchUnconfirmed {
        /// The batches' namespace.
        namespace: String,
        /// The batch.
        name: String,
        /// What the watch showed.
        why: String,
    },

    /// The KarmadaQuota cache has not finished its initial list yet.
    #[error("the KarmadaQuota cache has not synced yet; retry")]
    NotSynced,

    /// A watch of the cache has failed for longer than `--max-cache-staleness`: what the
    /// webhook knows of the quotas may be out of date, so it does not charge against it.
    #[error("{0}; not deciding against an out-of-date quota view; retry")]
    Stale(cache::Stale),

    /// The namespace is not in the Namespace cache (yet): which KarmadaClusterQuotas select
    /// it cannot be told.
    #[error(
        "namespace {0} is not in the webhook's Namespace cache yet, so the \
         KarmadaClusterQuotas selecting it are unknown; retry"
    )]
    UnknownNamespace(String),

    /// The queue's worker went away without answering (a bug; logged).
    #[error("the reservation worker stopped without answering a request of namespace {0}")]
    WorkerGone(String),

    /// The TLS certificate, key or client CA bundle could not be loaded (names the file).
    #[error(transparent)]
    Tls(std::sync::Arc<karmada_quota_shell::listener::TlsError>),

    /// The HTTPS server failed.
    #[error("HTTPS server on {addr}: {source}")]
    Serve {
        /// Listen address.
        addr: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        source: std::sync::Arc<std::io::Error>,
    },
}

impl From<karmada_quota_shell::listener::TlsError> for Error {
    fn from(e: karmada_quota_shell::listener::TlsError) -> Self {
        Error::Tls(std::sync::Arc::new(e))
    }
}

/// `KarmadaQuota ns/name`, or `KarmadaClusterQuota name` when `namespace` is empty: how
/// errors name a quota object.
pub fn quota_ref(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("KarmadaClusterQuota {name}")
    } else {
        format!("KarmadaQuota {namespace}/{name}")
    }
}

/// `KarmadaQuota ns/name`, or `KarmadaClusterQuota name` when `namespace` is empty.
fn quota_label(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("KarmadaClusterQuota {name}")
    } else {
        format!("KarmadaQuota {namespace}/{name}")
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Timeout => "timeout",
            Error::Store { source, .. } => source.metric_label(),
            Error::InvalidQuota { .. } => "invalid_quota",
            Error::UnknownPlural { .. } => "unknown_plural",
            Error::Batch { source, .. } => source.metric_label(),
            Error::BatchContended { .. } => "too_many_conflicts",
            Error::InvalidBatch { .. } => "invalid_batch",
            Error::BatchesUnseen { .. } => "batches_unseen",
            Error::BatchWatchDown { .. } => "batch_watch_down",
            Error::StoreNotFenced { .. } => "reservation_store_not_fenced",
            Error::BatchesBehind { .. } => "batches_behind",
            Error::BatchUnconfirmed { .. } => "batch_unconfirmed",
            Error::NotSynced => "not_synced",
            Error::Stale(_) => "stale_cache",
            Error::UnknownNamespace(_) => "unknown_namespace",
            Error::WorkerGone(_) => "worker_gone",
            Error::Tls(_) => "tls",
            Error::Serve { .. } => "serve",
        }
    }

    /// HTTP code for the AdmissionResponse status.
    pub fn code(&self) -> u16 {
        match self {
            Error::Timeout => 504,
            Error::NotSynced
            | Error::Stale(_)
            | Error::UnknownNamespace(_)
            | Error::BatchesUnseen { .. }
            | Error::BatchWatchDown { .. }
            | Error::StoreNotFenced { .. }
            | Error::BatchesBehind { .. }
            | Error::BatchUnconfirmed { .. } => 503,
            _ => 500,
        }
    }

    /// Kubernetes-style `status.reason` for the AdmissionResponse: the name of
    /// [`Error::code`].
    pub fn reason(&self) -> &'static str {
        match self.code() {
            504 => "Timeout",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        }
    }
}
