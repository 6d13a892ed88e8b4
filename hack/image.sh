#!/usr/bin/env bash
# The container image the chart deploys, built on this machine: no Rust base image, no
# musl target, no Docker daemon needed.
#
#   hack/image.sh build      # release binaries (static glibc) on the host, a staged build
#                            # context, the image (docker when a daemon answers, else
#                            # buildah), exported to <target>/image/karmada-quota-<v>.oci.tar
#                            # (docker: .docker.tar) with its digest and size in
#                            # <target>/image/karmada-quota-<v>.json
#   hack/image.sh stage DIR  # only the build context (the binaries must be built)
#   hack/image.sh test       # e2e/tests/image.rs: both binaries run from the image's root
#                            # filesystem, read-only, as uid 65532, on the loopback
#                            # control plane (make image runs build, then test)
#
# <target> is $CARGO_TARGET_DIR, else target/. The binaries are built with
# `-C target-feature=+crt-static` for x86_64-unknown-linux-gnu into
# <target>/x86_64-unknown-linux-gnu/release (the debug artifacts stay). glibc 2.34+ has
# its /etc/hosts and DNS resolvers built in, so a static binary resolves member endpoints
# by name without NSS libraries (the image test proves both through the binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

readonly TRIPLE=x86_64-unknown-linux-gnu
readonly BINARIES=(karmada-quota-webhook karmada-quota-controller)
readonly CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

step() { echo "==> $*" >&2; }
die() {
    echo "image.sh: $*" >&2
    exit 1
}

target=${CARGO_TARGET_DIR:-$root/target}
version=$(sed -n 's/^appVersion: "\(.*\)"/\1/p' charts/karmada-quota/Chart.yaml)
[[ -n $version ]] || die "no appVersion in charts/karmada-quota/Chart.yaml"
readonly TAG="karmada-quota:$version"
out_dir=$target/image
release_dir=$target/$TRIPLE/release

build_binaries() {
    step "cargo build --release --locked --target $TRIPLE (static glibc) ${BINARIES[*]}"
    local t0=$SECONDS
    RUSTFLAGS='-C target-feature=+crt-static' nice -n 10 cargo build --release --locked \
        --target "$TRIPLE" -p karmada-quota-webhook -p karmada-quota-controller
    step "release build: $((SECONDS - t0)) s"
}

# A static executable has no program interpreter (no ld.so to load host libraries).
check_static() {
    local bin=$1
    if command -v readelf >/dev/null; then
        if readelf -l "$bin" | grep -q 'Requesting program interpreter'; then
            die "$bin is dynamically linked (it would need the host's ld.so and libc)"
        fi
    fi
}

cmd_stage() {
    local ctx=$1 b
    [[ -f $CA_BUNDLE ]] || die "$CA_BUNDLE missing: apt-get install ca-certificates"
    rm -rf "$ctx"
    mkdir -p "$ctx/etc/ssl/certs"
    cp hack/image/etc/passwd hack/image/etc/group hack/image/etc/nsswitch.conf "$ctx/etc/"
    cp "$CA_BUNDLE" "$ctx/etc/ssl/certs/ca-certificates.crt"
    for b in "${BINARIES[@]}"; do
        [[ -x $release_dir/$b ]] || die "$release_dir/$b not built: run '$0 build'"
        check_static "$release_dir/$b"
        install -m 0755 "$release_dir/$b" "$ctx/$b"
    done
    cp Dockerfile "$ctx/Dockerfile"
    step "build context staged in $ctx"
}

# docker only when its daemon answers: the client alone is installed on many machines.
docker_works() { command -v docker >/dev/null && docker info >/dev/null 2>&1; }

build_with_docker() {
    local ctx=$1 archive=$out_dir/karmada-quota-$version.docker.tar
    step "docker build -t $TAG"
    docker build -t "$TAG" -f "$ctx/Dockerfile" "$ctx"
    docker save -o "$archive" "$TAG"
    local id
    id=$(docker image inspect --format '{{.Id}}' "$TAG")
    write_meta docker "$archive" "" "$id"
}

build_with_buildah() {
    local ctx=$1 archive=$out_dir/karmada-quota-$version.oci.tar
    local buildah
    buildah=$(hack/tools.sh buildah)
    # Storage of its own under the target dir: nothing outside it is read or left behind.
    local store=(--root "$out_dir/storage" --runroot "$out_dir/run" --storage-driver vfs)
    step "buildah bud --isolation chroot -t $TAG (storage: $out_dir/storage)"
    # --timestamp 0: the same binaries give the same layer, config and digest.
    "$buildah" "${store[@]}" bud --quiet --isolation chroot --timestamp 0 \
        -t "$TAG" -f "$ctx/Dockerfile" "$ctx" >/dev/null
    rm -f "$archive" "$out_dir/digest"
    "$buildah" "${store[@]}" push --quiet --digestfile "$out_dir/digest" "$TAG" \
        "oci-archive:$archive:$TAG"
    local digest id
    digest=$(cat "$out_dir/digest")
    id=$("$buildah" "${store[@]}" images --noheading --no-trunc --format '{{.ID}}' "$TAG")
    "$buildah" "${store[@]}" rmi -f "$TAG" >/dev/null
    rm -rf "$out_dir/storage" "$out_dir/run" "$out_dir/digest"
    write_meta buildah "$archive" "$digest" "sha256:${id#sha256:}"
    local recorded
    recorded=$(cat hack/image/digest 2>/dev/null || true)
    if [[ $digest != "$recorded" ]]; then
        step "note: hack/image/digest records ${recorded:-nothing}; the README cites it. Other"
        step "      binaries give another digest: record this one with the commit that made it."
    fi
}

# <target>/image/karmada-quota-<v>.json: what the README records and the image test reads.
write_meta() {
    local engine=$1 archive=$2 digest=$3 id=$4
    local meta=$out_dir/karmada-quota-$version.json
    local archive_bytes binaries_bytes=0 b
    archive_bytes=$(stat -c %s "$archive")
    for b in "${BINARIES[@]}"; do
        binaries_bytes=$((binaries_bytes + $(stat -c %s "$release_dir/$b")))
    done
    cat >"$meta" <<EOF
{
  "image": "$TAG",
  "engine": "$engine",
  "archive": "$archive",
  "manifest_digest": "$digest",
  "image_id": "$id",
  "archive_bytes": $archive_bytes,
  "binaries_bytes": $binaries_bytes
}
EOF
    step "image $TAG ($engine): ${digest:-no manifest digest (docker save)}, id $id"
    step "archive $archive: $archive_bytes bytes; binaries: $binaries_bytes bytes"
    echo "$meta"
}

cmd_build() {
    build_binaries
    mkdir -p "$out_dir"
    local ctx=$out_dir/context
    cmd_stage "$ctx"
    if docker_works; then
        build_with_docker "$ctx"
    else
        step "no Docker daemon answers: building with buildah"
        build_with_buildah "$ctx"
    fi
    rm -rf "$ctx"
}

cmd_test() {
    step "e2e/tests/image.rs against the exported image"
    # No skip allowed: a missing archive or root fails the test (e2e/src/skip.rs).
    KQ_ALLOW_SKIP= cargo nextest run -p karmada-quota-e2e --locked --run-ignored all \
        --test image --no-fail-fast
}

case ${1:-} in
build) cmd_build ;;
stage)
    [[ $# -eq 2 ]] || die "usage: $0 stage DIR"
    cmd_stage "$2"
    ;;
test) cmd_test ;;
*)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
