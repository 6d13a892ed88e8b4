//! Fuzz targets for every parser of karmada-quota that reads outside input.
//!
//! ```text
//!  bytes ──► target (one per parser) ──► the parser ──► its laws, asserted
//!              ▲                                         (a broken law panics = a finding)
//!              ├── fuzz/afl: AFL++ (cargo afl), coverage-guided, `make fuzz`
//!              └── tests/corpus.rs: every seed of fuzz/corpus/<target>/ replayed in `cargo test`
//! ```
//!
//! A target returns quietly on input its parser rejects *in the expected way*; it panics
//! only when the parser panics or breaks one of the laws stated on the target. Targets are
//! plain functions so that the AFL harness, the corpus replay and regression tests share
//! them.

pub mod admission;
pub mod cluster_quota;
pub mod dashboard_inputs;
pub mod manifests;
pub mod member_pods;
pub mod member_secret;
pub mod parts;
pub mod policy_review;
pub mod prometheus;
pub mod quantity;
pub mod quota_spec;
pub mod quota_status;
pub mod resource_name;

/// One fuzz target: its name (also its corpus directory) and its entry point.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    /// Name on the command line and directory under `fuzz/corpus/`.
    pub name: &'static str,
    /// Runs one input; panics on a finding.
    pub run: fn(&[u8]),
}

/// Every target, in the order `make fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "quantity",
        run: quantity::run,
    },
    Target {
        name: "resource_name",
        run: resource_name::run,
    },
    Target {
        name: "quota_spec",
        run: quota_spec::run,
    },
    Target {
        name: "admission",
        run: admission::run,
    },
    Target {
        name: "quota_status",
        run: quota_status::run,
    },
    Target {
        name: "member_secret",
        run: member_secret::run,
    },
    Target {
        name: "policy_review",
        run: policy_review::run,
    },
    Target {
        name: "cluster_quota",
        run: cluster_quota::run,
    },
    Target {
        name: "dashboard_inputs",
        run: dashboard_inputs::run,
    },
    Target {
        name: "prometheus",
        run: prometheus::run,
    },
    Target {
        name: "member_pods",
        run: member_pods::run,
    },
    Target {
        name: "manifests",
        run: manifests::run,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
