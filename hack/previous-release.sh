#!/usr/bin/env bash
# Packs the source of an earlier release of this repository as the test data the upgrade
# test runs as its old pods: hack/test.sh builds the webhook and the controller from it
# (e2e/tests/upgrade.rs, docs/upgrade.md "What the test proves"). Run once per release by
# whoever cuts it, beside hack/previous-chart.sh; the test itself never reads git history
# (CI may run a shallow clone).
#
#   hack/previous-release.sh COMMIT   # testdata/previous-release/karmada-quota-<version>-src.tar.gz
#
# The previous release, 0.1.0, is commit d14ad1f (its chart is
# testdata/charts/karmada-quota-0.1.0.tgz).
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "previous-release.sh: $*" >&2
    exit 1
}

[[ $# -eq 1 ]] || die "usage: hack/previous-release.sh COMMIT"
commit=$1
git cat-file -e "$commit:Cargo.toml" 2>/dev/null ||
    die "$commit has no Cargo.toml (a shallow clone? fetch the history first)"
version=$(git show "$commit:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
[[ -n $version ]] || die "no workspace version in $commit:Cargo.toml"
out=testdata/previous-release/karmada-quota-$version-src.tar.gz
mkdir -p testdata/previous-release
# The whole tree of the commit (the workspace needs every member), its commit recorded in
# the archive's comment (`gzip -l`/`git get-tar-commit-id` read it back).
git archive --format=tar "$commit" | gzip -9 -n >"$out"
echo "$out: $(git rev-parse "$commit"), $(wc -c <"$out") bytes"
