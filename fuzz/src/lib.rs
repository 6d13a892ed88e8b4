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
pub mod member_secret;
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
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
