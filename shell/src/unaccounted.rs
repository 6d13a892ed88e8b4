//! `--unaccounted-workloads`, the one flag value both binaries take (they must agree): what
//! a quota that sets no `spec.unaccountedWorkloads` does with a workload nothing counts.

/// `--unaccounted-workloads` (env `KQ_UNACCOUNTED_WORKLOADS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UnaccountedArg {
    /// The webhook refuses it, naming the kind.
    Deny,
    /// Admitted; the controller charges the pods the members run for it.
    Observed,
    /// Admitted with its object count only.
    Allow,
}

impl From<UnaccountedArg> for karmada_quota_core::quota::Unaccounted {
    fn from(a: UnaccountedArg) -> Self {
        match a {
            UnaccountedArg::Deny => Self::Deny,
            UnaccountedArg::Observed => Self::Observed,
            UnaccountedArg::Allow => Self::Allow,
        }
    }
}
