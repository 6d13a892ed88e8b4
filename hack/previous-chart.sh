#!/usr/bin/env bash
# Packages the chart as it was at an earlier commit of this repository, as the test data of
# the upgrade test (e2e/tests/upgrade.rs installs it, then upgrades to charts/karmada-quota).
# Run once per release by whoever cuts it; the test itself never reads git history (CI may
# run a shallow clone).
#
#   hack/previous-chart.sh COMMIT        # testdata/charts/karmada-quota-<version>.tgz
#
# The previous release of the chart, 0.1.0, is the chart at d14ad1f (the end of the second
# round of work: before the KarmadaClusterQuotaShare CRD, spec.drainingReplicas,
# observedLimit, unaccountedWorkloads, client authentication and the separate dashboard).
# helm comes from hack/tools.sh (or $KQ_TOOLS_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "previous-chart.sh: $*" >&2
    exit 1
}

[[ $# -eq 1 ]] || die "usage: hack/previous-chart.sh COMMIT"
commit=$1
git cat-file -e "$commit:charts/karmada-quota/Chart.yaml" 2>/dev/null ||
    die "$commit has no charts/karmada-quota (a shallow clone? fetch the history first)"
helm=${KQ_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota/tools/bin}/helm
[[ -x $helm ]] || die "$helm not found: run hack/tools.sh install"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git archive "$commit" charts/karmada-quota | tar -x -C "$scratch"
mkdir -p testdata/charts
# A package records the commit it came from (Chart.yaml annotation), so the test data says
# what it is.
sed -i "/^version:/i annotations:\n  karmada-quota.io/source-commit: \"$(git rev-parse "$commit")\"" \
    "$scratch/charts/karmada-quota/Chart.yaml"
HELM_CACHE_HOME=$scratch/home HELM_CONFIG_HOME=$scratch/home HELM_DATA_HOME=$scratch/home \
    "$helm" package "$scratch/charts/karmada-quota" --destination testdata/charts
