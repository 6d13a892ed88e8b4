#!/usr/bin/env bash
# Packs an earlier release of this repository as the test data of the upgrade test
# (e2e/tests/upgrade.rs, docs/upgrade.md "What the test proves"): its chart, which the test
# installs and then upgrades to charts/karmada-quota, and its source, from which
# hack/test.sh builds the webhook and the controller the test runs as the old pods. Run
# once per release by whoever cuts it; the test itself never reads git history (CI may
# run a shallow clone).
#
#   hack/previous-release.sh COMMIT
#     testdata/charts/karmada-quota-<chart version>.tgz
#     testdata/previous-release/karmada-quota-<version>-src.tar.gz
#
# The previous release, 0.2.0, is commit 6a3b0bb (the status store's last release: its
# default `reservationStore: status`, batches opt-in); 0.1.0 was d14ad1f. helm comes
# from hack/tools.sh (or $KQ_TOOLS_BIN).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "previous-release.sh: $*" >&2
    exit 1
}

[[ $# -eq 1 ]] || die "usage: hack/previous-release.sh COMMIT"
commit=$1
for path in Cargo.toml charts/karmada-quota/Chart.yaml; do
    git cat-file -e "$commit:$path" 2>/dev/null ||
        die "$commit has no $path (a shallow clone? fetch the history first)"
done
helm=${KQ_TOOLS_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota/tools/bin}/helm
[[ -x $helm ]] || die "$helm not found: run hack/tools.sh install"

# The chart. A package records the commit it came from (a Chart.yaml annotation), so the
# test data says what it is.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git archive "$commit" charts/karmada-quota | tar -x -C "$scratch"
mkdir -p testdata/charts
sed -i "/^version:/i annotations:\n  karmada-quota.io/source-commit: \"$(git rev-parse "$commit")\"" \
    "$scratch/charts/karmada-quota/Chart.yaml"
HELM_CACHE_HOME=$scratch/home HELM_CONFIG_HOME=$scratch/home HELM_DATA_HOME=$scratch/home \
    "$helm" package "$scratch/charts/karmada-quota" --destination testdata/charts

# The source: the whole tree of the commit (the workspace needs every member), its commit
# recorded in the archive's comment (`git get-tar-commit-id` reads it back).
version=$(git show "$commit:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
[[ -n $version ]] || die "no workspace version in $commit:Cargo.toml"
out=testdata/previous-release/karmada-quota-$version-src.tar.gz
mkdir -p testdata/previous-release
git archive --format=tar "$commit" | gzip -9 -n >"$out"
echo "$out: $(git rev-parse "$commit"), $(wc -c <"$out") bytes"
