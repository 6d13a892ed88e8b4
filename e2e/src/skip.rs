//! A test's missing prerequisite: the test fails, naming what is missing, unless that
//! prerequisite is allowed to be missing by name in `KQ_ALLOW_SKIP`; then the skip is
//! recorded (a line of `KQ_SKIP_LOG`, else stderr) and the test goes on without it, so
//! `make test` can name every test that did not really run (hack/test-summary.sh).
//!
//! ```text
//!  test ── prerequisite("image", "no image archive …")
//!            │ "image" ∉ KQ_ALLOW_SKIP ──▶ Err: the reason + `KQ_ALLOW_SKIP=image`
//!            └ "image" ∈ KQ_ALLOW_SKIP ──▶ KQ_SKIP_LOG += "<binary id> <test>\t<reason> (KQ_ALLOW_SKIP=image)"
//!                                          Ok(()): the test returns, or goes on without it
//! ```
//!
//! The names, and what each stands for, are in [`NAMES`] and docs/testing.md.

use std::fmt::Display;
use std::io::Write;

use anyhow::{Context, Result, bail};

/// Comma-separated names of the prerequisites that may be missing.
pub const ENV_ALLOW_SKIP: &str = "KQ_ALLOW_SKIP";
/// A file each allowed skip appends one line to (`<test>\t<reason>`).
pub const ENV_SKIP_LOG: &str = "KQ_SKIP_LOG";

/// The image archive `make image` builds, and root to enter it (e2e/tests/image.rs).
pub const IMAGE: &str = "image";
/// A Karmada feature gate a real-Karmada test needs (e2e/tests/karmada_*.rs).
pub const KARMADA_GATES: &str = "karmada-gates";
/// kubectl on PATH, to find and run the installed plugin (cli/tests/plugin_dist.rs).
pub const KUBECTL: &str = "kubectl";
/// The previous release's binaries, run as the old pods (e2e/tests/upgrade.rs).
pub const PREVIOUS_RELEASE: &str = "previous-release";
/// Every name a test may pass to [`prerequisite`].
pub const NAMES: [&str; 4] = [IMAGE, KARMADA_GATES, KUBECTL, PREVIOUS_RELEASE];

/// Called by a test when prerequisite `name` is missing, `reason` saying what did not run
/// and why. An error (the test fails) unless `name` is in `KQ_ALLOW_SKIP`; then the skip
/// is recorded and `Ok(())` returned.
pub fn prerequisite(name: &str, reason: impl Display) -> Result<()> {
    let allowed = std::env::var(ENV_ALLOW_SKIP).unwrap_or_default();
    let line = decide(name, &reason.to_string(), &allowed, &test_id())?;
    record(&line)
}

/// The skip line to record, or the error that fails the test.
fn decide(name: &str, reason: &str, allowed: &str, test: &str) -> Result<String> {
    if !NAMES.contains(&name) {
        bail!("prerequisite name {name:?} is not one of {NAMES:?} (e2e/src/skip.rs)");
    }
    if allowed.split(',').map(str::trim).any(|a| a == name) {
        return Ok(format!("{test}\t{reason} ({ENV_ALLOW_SKIP}={name})"));
    }
    bail!(
        "{reason}. Missing prerequisite `{name}`: {ENV_ALLOW_SKIP}={name} lets the test pass \
         without it (docs/testing.md)"
    )
}

/// Appends `line` to `KQ_SKIP_LOG` (one write, so parallel test processes do not
/// interleave), or prints it when that is unset.
fn record(line: &str) -> Result<()> {
    let Some(path) = std::env::var_os(ENV_SKIP_LOG).filter(|p| !p.is_empty()) else {
        eprintln!("did not run: {}", line.replacen('\t', " — ", 1));
        return Ok(());
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {ENV_SKIP_LOG} {}", path.display()))?;
    file.write_all(format!("{line}\n").as_bytes())
        .with_context(|| format!("writing {ENV_SKIP_LOG} {}", path.display()))
}

/// The running test as nextest names it (`<binary id> <test>`), else the test thread's
/// name (libtest names it after the test).
fn test_id() -> String {
    let thread = std::thread::current().name().unwrap_or("?").to_owned();
    match (
        std::env::var("NEXTEST_BINARY_ID"),
        std::env::var("NEXTEST_TEST_NAME"),
    ) {
        (Ok(binary), Ok(test)) => format!("{binary} {test}"),
        (Ok(binary), Err(_)) => format!("{binary} {thread}"),
        _ => thread,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_prerequisite_fails_the_test_naming_the_reason_and_the_variable() {
        let e = decide(IMAGE, "no image archive", "", "t").unwrap_err();
        let text = format!("{e:#}");
        assert!(text.contains("no image archive"), "{text}");
        assert!(text.contains("KQ_ALLOW_SKIP=image"), "{text}");
        // Another name allowed, or a name that only contains this one, does not allow it.
        assert!(decide(IMAGE, "r", "kubectl,previous-release", "t").is_err());
        assert!(decide(IMAGE, "r", "images", "t").is_err());
    }

    #[test]
    fn an_allowed_prerequisite_is_recorded_as_a_line_naming_the_test_and_the_reason() {
        assert_eq!(
            decide(
                KUBECTL,
                "kubectl not found",
                "image, kubectl",
                "cli::plugin_dist t"
            )
            .unwrap(),
            "cli::plugin_dist t\tkubectl not found (KQ_ALLOW_SKIP=kubectl)"
        );
    }

    #[test]
    fn an_unknown_name_is_refused_even_when_allowed() {
        let e = decide("imag", "r", "imag", "t").unwrap_err();
        assert!(format!("{e}").contains("not one of"), "{e}");
    }
}
