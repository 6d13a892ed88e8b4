#!/usr/bin/env bash
# The main job: a local Karmada-like control plane (etcd + 3 kube-apiservers on loopback:
# the Karmada control plane and two member clusters) with the quota webhook and controller
# running in it, sample quotas, bindings and member pods. Runs until Ctrl-C, then stops
# everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "The demo arrives with the webhook and controller issues; for now run: make test" >&2
exit 2
