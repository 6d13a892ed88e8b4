//! The controller library's error type.

/// Errors of the controller library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// A quota's status could not be written (409s in a row, or an API error).
    #[error(transparent)]
    Status(#[from] karmada_quota_status::UpdateError),
    /// A KarmadaQuota without a namespace (never from a watch).
    #[error("KarmadaQuota {0} has no namespace")]
    MissingNamespace(String),
    /// A member cluster cannot be configured (Secret, CA bundle, endpoint, kubeconfig).
    #[error("member cluster {cluster}: {message}")]
    MemberConfig {
        /// Member name.
        cluster: String,
        /// What is wrong.
        message: String,
    },
    /// The admin server failed.
    #[error("admin server: {0}")]
    Admin(String),
    /// The flags ask for something unsafe or impossible (the message says which and why).
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// A short label for the `kq_controller_reconcile_errors` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Status(e) => match e {
                karmada_quota_status::UpdateError::Conflicts { .. } => "conflict",
                karmada_quota_status::UpdateError::Store { .. } => "kube",
            },
            Error::MissingNamespace(_) => "missing_namespace",
            Error::MemberConfig { .. } => "member_config",
            Error::Admin(_) => "admin",
            Error::Config(_) => "config",
        }
    }
}
