#!/usr/bin/env bash
# The kubectl plugin as a krew-style release (make plugin-dist):
#
#   <out>/kubectl-karmada_quota_v<version>_linux_<arch>.tar.gz
#       kubectl-karmada_quota   the binary
#       LICENSE                 the project's license (SPDX id, from Cargo.toml)
#       README.md               what the plugin does and how to call it
#   <out>/karmada-quota.yaml     a krew Plugin manifest (krew.googlecontainertools.github.com/
#                                v1alpha2) naming the archive's URI and sha256
#
# Install from the two files with krew:
#   kubectl krew install --manifest=<out>/karmada-quota.yaml --archive=<out>/<archive>
# or by hand: unpack the archive into a directory on PATH; kubectl finds
# kubectl-karmada_quota and runs it as `kubectl karmada-quota`.
#
# Inputs (environment):
#   KQ_PLUGIN_BIN       the binary to package (default: cargo build --release -p
#                       karmada-quota-cli, then target/release/kubectl-karmada_quota)
#   KQ_PLUGIN_URI_BASE  where the archive will be published (default: file://<out>)
#   OUT                 output directory (default: <target>/plugin-dist)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
target=${CARGO_TARGET_DIR:-$root/target}
out=${OUT:-$target/plugin-dist}
case ${1:-} in
-h | --help)
    sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
"") ;;
*)
    echo "plugin-dist.sh: unknown argument $1 (try --help)" >&2
    exit 2
    ;;
esac

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)
license=$(sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -n1)
[[ -n $version && -n $license ]] || { echo "plugin-dist.sh: no version/license in Cargo.toml" >&2; exit 1; }
case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) arch=$(uname -m) ;;
esac

bin=${KQ_PLUGIN_BIN:-}
if [[ -z $bin ]]; then
    echo "==> cargo build --release -p karmada-quota-cli" >&2
    cargo build --locked --release -p karmada-quota-cli
    bin=$target/release/kubectl-karmada_quota
fi
[[ -x $bin ]] || { echo "plugin-dist.sh: $bin is not an executable" >&2; exit 1; }

name=kubectl-karmada_quota_v${version}_linux_${arch}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out" "$stage/$name"
cp "$bin" "$stage/$name/kubectl-karmada_quota"
printf 'karmada-quota is licensed under %s (SPDX identifier, as its Cargo.toml says).\n' "$license" >"$stage/$name/LICENSE"
{
    echo "# kubectl karmada-quota v$version"
    echo
    echo "Global quotas of a Karmada control plane, per namespace and per business: get, describe,"
    echo "top, check (what-if of manifests before you apply them) and report (usage for billing)."
    echo
    echo '```'
    "$bin" --help
    echo '```'
} >"$stage/$name/README.md"
# Reproducible: fixed order, owner and times.
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='@0' \
    -C "$stage/$name" -czf "$out/$name.tar.gz" kubectl-karmada_quota LICENSE README.md
sha=$(sha256sum "$out/$name.tar.gz" | cut -d' ' -f1)
uri_base=${KQ_PLUGIN_URI_BASE:-file://$out}
cat >"$out/karmada-quota.yaml" <<YAML
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: karmada-quota
spec:
  version: v$version
  shortDescription: Global quotas of a Karmada control plane (get, top, check, report)
  description: |
    Reads the KarmadaQuotas and KarmadaClusterQuotas of a Karmada control plane: usage
    per member cluster, what-if checks of manifests before they are applied, and usage
    reports from Prometheus for billing.
  platforms:
    - selector:
        matchLabels: {os: linux, arch: $arch}
      uri: $uri_base/$name.tar.gz
      sha256: $sha
      files:
        - {from: kubectl-karmada_quota, to: .}
        - {from: LICENSE, to: .}
        - {from: README.md, to: .}
      bin: kubectl-karmada_quota
YAML
echo "$out/$name.tar.gz"
echo "$out/karmada-quota.yaml"
