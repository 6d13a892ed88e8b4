#!/usr/bin/env bash
# The main job: a local Karmada-like control plane (etcd + 3 kube-apiservers on loopback:
# the Karmada control plane and two member clusters) with the quota webhook and controller
# running in it, sample quotas, bindings and member pods from examples/. Runs until Ctrl-C,
# then stops everything it started.
#
#   hack/demo.sh                     # (or: make demo)
#   hack/demo.sh --exit-after-setup  # set up, print, clean up, exit (CI)
#
# Every argument goes to kq-demo (e2e/src/bin/kq-demo.rs); see `target/debug/kq-demo --help`.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "install the control plane's prerequisites (cached after the first run)"
e2e/controlplane/controlplane.sh install

step "build the binaries (webhook, controller, kq-demo)"
cargo build --bins --locked

step "run the demo (Ctrl-C stops it and everything it started)"
# exec: Ctrl-C and SIGTERM reach kq-demo itself, which cleans up.
exec "${CARGO_TARGET_DIR:-target}/debug/kq-demo" "$@"
