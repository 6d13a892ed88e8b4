#!/usr/bin/env bash
# A local Kubernetes control plane for karmada-quota's e2e tests: one etcd and N
# kube-apiservers (1.20.2, built from Debian's source package), all on 127.0.0.1.
#
#   controlplane.sh install                 # apt packages + build kube-apiserver once (cached)
#   controlplane.sh path                    # print the cached kube-apiserver path
#   controlplane.sh up DIR [N] [--owner-pid PID]
#                                           # etcd + N apiservers (default 3); CRDs into #0
#   controlplane.sh down DIR                # stop exactly what DIR/pids lists
#
# Layout of DIR after `up`:
#   env              shell-sourceable: N, TOKEN, ETCD_PORT, APISERVER_<I>_PORT,
#                    WEBHOOK_CLIENT_CA, WEBHOOK_CLIENT_CERT, WEBHOOK_CLIENT_KEY
#   webhook-client/  the client certificate apiserver 0 presents to every webhook that
#                    asks for one (CN=karmada-apiserver-webhook-client, signed by ca.pem),
#                    and the AdmissionConfiguration + kubeconfig that make it do so
#   kubeconfig-<I>   admin kubeconfig of apiserver I (0 = Karmada control plane, 1.. = members)
#   pids             "<pid> <name>" per line, read by `down`
#   watchdog.pid     with --owner-pid: the watchdog that runs `down` when the owner exits
#   logs/            etcd.log, apiserver-<I>.log, watchdog.log
#   etcd/ apiserver-<I>/ sa.key token.csv   data, serving certificates (cert-dir)
#
# Environment: XDG_CACHE_HOME (cache root), KARMADA_CRDS_DIR (a directory whose *.yaml are
# the Karmada CRDs to install: default the project's stand-ins in crds/karmada; point it at
# Karmada's own CRDs to test against those), UP_TIMEOUT (readiness wait, 60 s),
# APISERVER_EXTRA_ARGS (extra kube-apiserver flags, space-separated, appended last so they
# win: e.g. --profiling=true for bench/profile-apiserver.sh).
set -euo pipefail

readonly KUBE_VERSION=1.20.2
readonly KUBE_SRC_VERSION=1.20.5+really1.20.2
readonly CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota"
readonly APISERVER_BIN="$CACHE_DIR/kube-apiserver-$KUBE_VERSION"
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
readonly SCRIPT_DIR REPO_ROOT
# Apt files this script owns; nothing else in /etc/apt is touched.
readonly APT_SOURCES_FILE=/etc/apt/sources.list.d/karmada-quota.sources
readonly APT_PIN_FILE=/etc/apt/preferences.d/karmada-quota-bullseye
readonly DEBIAN_SOURCES=/etc/apt/sources.list.d/debian.sources

STEP="(start)"
UP_OWNER="" # --owner-pid of `up`, checked while waiting
step() {
    STEP="$*"
    echo "==> $*" >&2
}
die() {
    echo "controlplane.sh: step '$STEP' failed: $*" >&2
    exit 1
}
on_err() {
    local rc=$?
    echo "controlplane.sh: step '$STEP' failed (exit $rc at line ${BASH_LINENO[0]}: $BASH_COMMAND)" >&2
    exit "$rc"
}
trap on_err ERR

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    SUDO=(sudo)
fi

# ---------------------------------------------------------------------------
# install
# ---------------------------------------------------------------------------

# The first deb822 stanza of debian.sources whose Suites has plain "bookworm":
# prints "URIS<TAB>SIGNED_BY".
debian_entry() {
    [[ -r $DEBIAN_SOURCES ]] || die "$DEBIAN_SOURCES not found: cannot tell which Debian mirror this machine uses"
    awk '
        function flush() {
            if (!done && types ~ /(^| )deb( |$)/ && suites ~ /(^| )bookworm( |$)/ && uris != "") {
                printf "%s\t%s\n", uris, signed; done = 1
            }
            types = suites = uris = signed = ""
        }
        /^[ \t]*#/ { next }
        /^[ \t]*$/ { flush(); next }
        { key = $1; sub(/:$/, "", key); $1 = ""; sub(/^ +/, ""); val = $0 }
        key == "Types" { types = val }
        key == "Suites" { suites = val }
        key == "URIs" { uris = val }
        key == "Signed-By" { signed = val }
        END { flush() }
    ' "$DEBIAN_SOURCES"
}

# Writes $2 to file $1 (as root) when its content differs; returns 0 when it changed.
write_if_changed() {
    local file=$1 content=$2
    if [[ -f $file ]] && [[ "$(cat "$file")" == "$content" ]]; then
        return 1
    fi
    printf '%s\n' "$content" | "${SUDO[@]}" tee "$file" >/dev/null
    return 0
}

apt_sources() {
    step "apt sources: deb-src bookworm and bullseye (pinned 100) from $DEBIAN_SOURCES"
    local entry uris signed
    entry=$(debian_entry)
    [[ -n $entry ]] || die "no 'Types: deb' stanza with Suites bookworm in $DEBIAN_SOURCES"
    uris=${entry%%$'\t'*}
    signed=${entry#*$'\t'}
    local signed_line=""
    [[ -n $signed ]] && signed_line="Signed-By: $signed"
    local sources pin changed=1
    sources=$(printf '%s\n' \
        "# Written by karmada-quota e2e/controlplane/controlplane.sh install." \
        "# bookworm sources: the kubernetes source package (kube-apiserver $KUBE_VERSION)." \
        "Types: deb-src" "URIs: $uris" "Suites: bookworm" "Components: main" ${signed_line:+"$signed_line"} \
        "" \
        "# bullseye: only golang-1.15-go (pinned to 100 in $APT_PIN_FILE)." \
        "Types: deb" "URIs: $uris" "Suites: bullseye" "Components: main" ${signed_line:+"$signed_line"})
    pin=$(printf '%s\n' \
        "# Written by karmada-quota e2e/controlplane/controlplane.sh install:" \
        "# take nothing from bullseye unless asked for with -t bullseye." \
        "Package: *" "Pin: release n=bullseye" "Pin-Priority: 100")
    if write_if_changed "$APT_SOURCES_FILE" "$sources"; then changed=0; fi
    if write_if_changed "$APT_PIN_FILE" "$pin"; then changed=0; fi
    if [[ $changed -eq 0 ]]; then
        APT_UPDATED=0
        echo "    sources changed (mirror $uris)" >&2
    fi
}

APT_UPDATED=1 # 0 = an update is due (bash truthiness: 0 = yes)
APT_DONE_UPDATE=1
apt_update_once() {
    if [[ $APT_DONE_UPDATE -ne 0 ]]; then
        step "apt-get update"
        "${SUDO[@]}" apt-get update -q >&2 || die "apt-get update failed"
        APT_DONE_UPDATE=0
    fi
}

installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" == "install ok installed" ]]
}

apt_packages() {
    step "apt packages"
    local want=(etcd-server make rsync jq openssl dpkg-dev) missing=() p
    if ! command -v kubectl >/dev/null 2>&1; then
        want+=(kubernetes-client)
    fi
    for p in "${want[@]}"; do
        installed "$p" || missing+=("$p")
    done
    local need_go=1
    installed golang-1.15-go || need_go=0
    if [[ ${#missing[@]} -eq 0 && $need_go -ne 0 ]]; then
        echo "    all present" >&2
        [[ $APT_UPDATED -eq 0 ]] && apt_update_once
        return 0
    fi
    apt_update_once
    if [[ ${#missing[@]} -gt 0 ]]; then
        step "apt-get install ${missing[*]}"
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
            die "apt-get install ${missing[*]} failed"
    fi
    if [[ $need_go -eq 0 ]]; then
        step "apt-get install -t bullseye golang-1.15-go"
        DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -q --no-install-recommends -t bullseye golang-1.15-go >&2 ||
            die "apt-get install -t bullseye golang-1.15-go failed"
    fi
}

go115_bin() {
    local go
    go=$(dpkg -L golang-1.15-go | grep -E '/bin/go$' | head -n1) || true
    [[ -n $go && -x $go ]] || die "no bin/go in 'dpkg -L golang-1.15-go'"
    dirname "$go"
}

build_apiserver() {
    if [[ -x $APISERVER_BIN ]]; then
        step "kube-apiserver $KUBE_VERSION: cached at $APISERVER_BIN"
        return 0
    fi
    local gobin
    gobin=$(go115_bin)
    step "fetch source package kubernetes/bookworm ($KUBE_SRC_VERSION)"
    if ! apt-cache showsrc kubernetes 2>/dev/null | grep -q "^Version: $KUBE_SRC_VERSION"; then
        apt_update_once
    fi
    mkdir -p "$CACHE_DIR"
    BUILD_WORK=$(mktemp -d "$CACHE_DIR/build.XXXXXX")
    local work=$BUILD_WORK
    # Keep only the binary: the source tree (several GB once built) goes on any exit.
    trap 'rm -rf "$BUILD_WORK"' EXIT
    (cd "$work" && apt-get source -q --download-only kubernetes/bookworm >&2) ||
        die "apt-get source --download-only kubernetes/bookworm failed (is there a deb-src entry for bookworm?)"
    compgen -G "$work/kubernetes_${KUBE_SRC_VERSION}-*.dsc" >/dev/null ||
        die "expected kubernetes_${KUBE_SRC_VERSION}-*.dsc, got: $(ls "$work")"
    step "unpack source"
    (cd "$work" && dpkg-source -x --no-check ./*.dsc src >/dev/null) || die "dpkg-source -x failed"
    local src="$work/src"
    step "build cmd/kube-apiserver with Go 1.15 ($gobin), GOPATH mode, CGO_ENABLED=0 (~8 min on 2 cores)"
    mkdir -p "$src/.go/src/k8s.io"
    ln -s "$src" "$src/.go/src/k8s.io/kubernetes"
    # No .git in the tarball: give the build its version explicitly.
    cat >"$work/version.env" <<EOF
KUBE_GIT_COMMIT='faecb196815e248d3ecfb03c680a4507229c2a56'
KUBE_GIT_TREE_STATE='clean'
KUBE_GIT_VERSION='v$KUBE_VERSION'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
EOF
    local t0=$SECONDS
    (
        cd "$src/.go/src/k8s.io/kubernetes"
        env PATH="$gobin:$PATH" GOPATH="$src/.go" GO111MODULE=off CGO_ENABLED=0 \
            GOCACHE="$work/gocache" GOFLAGS= KUBE_GIT_VERSION_FILE="$work/version.env" \
            make WHAT=cmd/kube-apiserver >&2
    ) || die "make WHAT=cmd/kube-apiserver failed (see output above)"
    local out="$src/_output/local/bin/linux/amd64/kube-apiserver"
    [[ -x $out ]] || die "build finished but $out is missing"
    cp "$out" "$APISERVER_BIN.tmp.$$"
    mv "$APISERVER_BIN.tmp.$$" "$APISERVER_BIN"
    echo "    built in $((SECONDS - t0)) s: $("$APISERVER_BIN" --version)" >&2
    step "remove source tree"
    rm -rf "$work"
    trap - EXIT
}

cmd_install() {
    command -v apt-get >/dev/null || die "apt-get not found: this script supports Debian (bookworm) only"
    mkdir -p "$CACHE_DIR"
    # One installer at a time (parallel test processes may all call install).
    exec 9>"$CACHE_DIR/install.lock"
    flock 9
    apt_sources
    apt_packages
    build_apiserver
    step "install done"
    echo "$APISERVER_BIN"
}

cmd_path() {
    [[ -x $APISERVER_BIN ]] || die "kube-apiserver not built yet: run '$0 install'"
    echo "$APISERVER_BIN"
}

# ---------------------------------------------------------------------------
# up / down
# ---------------------------------------------------------------------------

# Prints N free TCP ports on 127.0.0.1, one per line (all held open at once while
# choosing, so they are distinct).
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PY
}

# Starts "$@" in its own session (so a Ctrl-C of the test run does not reach it; the
# watchdog or `down` stops it), output to log $2, and records "<pid> <name $1>" in pids.
spawn() {
    local name=$1 log=$2
    shift 2
    setsid "$@" >"$log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid $name" >>"$DIR/pids"
    echo "    $name: pid $pid, log $log" >&2
}

# Whether pid $1 runs (a zombie waiting for its reaper does not count).
pid_alive() {
    local stat
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# Whether pid $1 is alive and ours: its command line names DIR (a reused pid would not).
pid_ours() {
    pid_alive "$1" && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF -- "$DIR"
}

tail_log() {
    echo "---- last 30 lines of $1 ----" >&2
    tail -n 30 "$1" >&2 || true
    echo "----" >&2
}

# wait_http WHAT PID LOG URL [CURL ARGS...]: polls URL while PID lives; on death or
# timeout (UP_TIMEOUT, default 60 s) prints LOG's tail and fails.
wait_http() {
    local what=$1 pid=$2 log=$3 url=$4 timeout=${UP_TIMEOUT:-60}
    local deadline=$((SECONDS + timeout))
    shift 4
    until curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; do
        if ! pid_alive "$pid"; then
            tail_log "$log"
            die "$what exited before it was ready"
        fi
        if [[ -n $UP_OWNER ]] && ! pid_alive "$UP_OWNER"; then
            die "owner pid $UP_OWNER exited while waiting for $what"
        fi
        if ((SECONDS >= deadline)); then
            tail_log "$log"
            die "$what not ready at $url after $timeout s"
        fi
        sleep 0.3
    done
}

# The webhook client identity of apiserver 0 (the Karmada control plane): a CA, a client
# certificate it signed, and an AdmissionConfiguration whose kubeConfigFile gives that
# certificate to every webhook host (user "*"), for ValidatingAdmissionWebhook and
# MutatingAdmissionWebhook. A webhook that asks for no client certificate never sees it.
readonly WEBHOOK_CLIENT_CN=karmada-apiserver-webhook-client
webhook_client_identity() {
    local d=$DIR/webhook-client
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    step "webhook client certificate of apiserver 0 (CN=$WEBHOOK_CLIENT_CN)"
    mkdir -p "$d"
    openssl req -x509 "${ec[@]}" -days 30 -subj /CN=karmada-quota-e2e-webhook-client-ca \
        -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null || die "openssl: webhook client CA"
    openssl req "${ec[@]}" -subj "/CN=$WEBHOOK_CLIENT_CN" \
        -keyout "$d/client.key" -out "$d/client.csr" 2>/dev/null || die "openssl: client key"
    printf '%s\n' basicConstraints=CA:FALSE keyUsage=digitalSignature \
        extendedKeyUsage=clientAuth >"$d/client.ext"
    openssl x509 -req -days 30 -set_serial 1 -in "$d/client.csr" -CA "$d/ca.pem" \
        -CAkey "$d/ca.key" -extfile "$d/client.ext" -out "$d/client.pem" 2>/dev/null ||
        die "openssl: sign the webhook client certificate"
    rm -f "$d/client.csr" "$d/client.ext"
    chmod 600 "$d/ca.key" "$d/client.key"
    cat >"$d/kubeconfig" <<EOF
# Credentials apiserver 0 presents to webhooks: "*" matches every webhook host.
apiVersion: v1
kind: Config
users:
- name: '*'
  user:
    client-certificate: $d/client.pem
    client-key: $d/client.key
EOF
    local plugin
    {
        echo "apiVersion: apiserver.config.k8s.io/v1"
        echo "kind: AdmissionConfiguration"
        echo "plugins:"
        for plugin in ValidatingAdmissionWebhook MutatingAdmissionWebhook; do
            echo "- name: $plugin"
            echo "  configuration:"
            echo "    apiVersion: apiserver.config.k8s.io/v1"
            echo "    kind: WebhookAdmissionConfiguration"
            echo "    kubeConfigFile: $d/kubeconfig"
        done
    } >"$d/admission-config.yaml"
    {
        echo "WEBHOOK_CLIENT_CA=$d/ca.pem"
        echo "WEBHOOK_CLIENT_CERT=$d/client.pem"
        echo "WEBHOOK_CLIENT_KEY=$d/client.key"
    } >>"$DIR/env"
}

write_kubeconfig() {
    local i=$1 port=$2 tls
    local file=$DIR/kubeconfig-$i crt=$DIR/apiserver-$i/apiserver.crt
    # The self-signed serving certificate file holds the leaf and the CA that signed it:
    # trust it when it verifies for 127.0.0.1, else skip verification.
    if [[ -s $crt ]] && curl -fsS -o /dev/null --max-time 5 --cacert "$crt" \
        -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$port/readyz" 2>/dev/null; then
        tls="    certificate-authority-data: $(base64 -w0 "$crt")"
    else
        echo "    warning: $crt does not verify for 127.0.0.1; kubeconfig-$i skips TLS verification" >&2
        tls="    insecure-skip-tls-verify: true"
    fi
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e-$i
  cluster:
    server: https://127.0.0.1:$port
$tls
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: e2e-$i
  context:
    cluster: e2e-$i
    user: admin
current-context: e2e-$i
EOF
    chmod 600 "$file"
}

kubectl0() {
    kubectl --kubeconfig "$DIR/kubeconfig-0" --cache-dir "$DIR/kubectl-cache" "$@"
}

# The CRD file $1 without its x-kubernetes-validations rules, on stdout: the key's line
# and every line under it (deeper, or its list items at the key's own indent). The field
# is 1.25's: kubectl refuses it against kube-apiserver $KUBE_VERSION's schema, which does
# not evaluate it; the webhook checks the same. The chart leaves the rules out for such an
# apiserver alike (templates/crd.yaml).
strip_validation_rules() {
    awk '
        skip && match($0, /^ */) && (RLENGTH > depth || (RLENGTH == depth && substr($0, depth + 1, 2) == "- ")) { next }
        { skip = 0 }
        /^ *x-kubernetes-validations:/ { match($0, /^ */); depth = RLENGTH; skip = 1; next }
        { print }
    ' "$1"
}

install_crds() {
    local crds_dir=${KARMADA_CRDS_DIR:-$REPO_ROOT/crds/karmada}
    local own=$REPO_ROOT/crds/quota.karmada.io_karmadaquotas.yaml
    local files=() f
    step "install CRDs into apiserver 0"
    compgen -G "$crds_dir/*.yaml" >/dev/null ||
        die "no Karmada CRDs (*.yaml) in $crds_dir (KARMADA_CRDS_DIR)"
    files+=("$crds_dir"/*.yaml)
    if [[ -f $own ]]; then
        files+=("$own")
    else
        echo "    warning: $own does not exist yet; KarmadaQuota CRD not installed" >&2
    fi
    local own_more
    for own_more in karmadaclusterquotas karmadaclusterquotashares karmadaquotareservations; do
        if [[ -f $REPO_ROOT/crds/quota.karmada.io_$own_more.yaml ]]; then
            files+=("$REPO_ROOT/crds/quota.karmada.io_$own_more.yaml")
        fi
    done
    [[ ${#files[@]} -gt 0 ]] || return 0
    local args=() names stripped=$DIR/crds
    mkdir -p "$stripped"
    for f in "${files[@]}"; do
        if [[ $f == "$REPO_ROOT"/crds/quota.karmada.io_* ]]; then
            strip_validation_rules "$f" >"$stripped/${f##*/}" || die "cannot strip $f"
            f=$stripped/${f##*/}
        fi
        args+=(-f "$f")
    done
    # Server-side apply: Karmada's big CRDs would overflow client-side apply's
    # last-applied annotation.
    kubectl0 apply --server-side --field-manager=karmada-quota-e2e --force-conflicts "${args[@]}" >&2 ||
        die "kubectl apply of the CRDs failed"
    names=$(kubectl0 get "${args[@]}" -o name) || die "cannot list the applied CRDs"
    step "wait for CRDs to be Established"
    # shellcheck disable=SC2086 # one argument per CRD name
    kubectl0 wait --for condition=established --timeout=60s $names >&2 ||
        die "CRDs not Established within 60 s"
}

# Starts a watchdog that runs `down DIR` once pid $1 has exited. Started before anything
# else so that an owner killed in the middle of `up` leaks nothing: the watchdog then waits
# for this `up` to end (it notices the owner is gone, or dies of SIGPIPE writing to it)
# before stopping everything `up` recorded.
start_watchdog() {
    local owner=$1
    pid_alive "$owner" || die "--owner-pid $owner is not a running process"
    step "watchdog: down $DIR when pid $owner exits"
    # exec keeps the watchdog's pid for `down`, which then knows not to signal itself.
    # shellcheck disable=SC2016 # expanded by the watchdog's bash, from its arguments
    setsid nohup bash -c '
        owner=$1 up=$2 script=$3 dir=$4
        while kill -0 "$owner" 2>/dev/null; do sleep 1; done
        echo "owner $owner exited at $(date -Is)"
        while [[ ! -e $dir/up.done ]] && kill -0 "$up" 2>/dev/null; do sleep 0.2; done
        echo "bringing the control plane down"
        exec "$script" down "$dir"
    ' watchdog "$owner" "$$" "$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")" "$DIR" \
        >>"$DIR/logs/watchdog.log" 2>&1 </dev/null &
    echo "$!" >"$DIR/watchdog.pid"
}

# EXIT trap of `up`: a failed `up` stops whatever it had started; up.done tells the
# watchdog that `up` is over.
up_exit() {
    if [[ $UP_OK -ne 1 ]]; then
        echo "up failed: stopping what it started" >&2
        cmd_down "$DIR" || true
    fi
    touch "$DIR/up.done"
}

cmd_up() {
    local n=3 owner="" positional=()
    while [[ $# -gt 0 ]]; do
        case $1 in
        --owner-pid)
            [[ $# -ge 2 ]] || die "--owner-pid needs a pid"
            owner=$2
            shift 2
            ;;
        --owner-pid=*)
            owner=${1#*=}
            shift
            ;;
        -*) die "unknown option $1" ;;
        *)
            positional+=("$1")
            shift
            ;;
        esac
    done
    [[ ${#positional[@]} -ge 1 && ${#positional[@]} -le 2 ]] || usage
    [[ ${#positional[@]} -eq 2 ]] && n=${positional[1]}
    [[ $n =~ ^[1-9][0-9]*$ ]] || die "N must be a positive number, got '$n'"
    [[ -z $owner || $owner =~ ^[0-9]+$ ]] || die "--owner-pid must be a pid, got '$owner'"
    mkdir -p "${positional[0]}"
    DIR=$(cd "${positional[0]}" && pwd)
    local t0=$SECONDS

    step "check $DIR is not already up"
    local pid name
    if [[ -f $DIR/pids ]]; then
        while read -r pid name; do
            if [[ -n $pid ]] && pid_ours "$pid"; then
                die "$name (pid $pid) from a previous 'up' still runs: run '$0 down $DIR' first"
            fi
        done <"$DIR/pids"
    fi
    # A watchdog left from an earlier `up` whose processes died on their own would
    # otherwise `down` the new ones when its owner exits.
    if [[ -f $DIR/watchdog.pid ]]; then
        pid=$(cat "$DIR/watchdog.pid")
        if pid_ours "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
    fi
    rm -rf "$DIR/pids" "$DIR/env" "$DIR"/kubeconfig-* "$DIR/etcd" "$DIR"/apiserver-* "$DIR/webhook-client" \
        "$DIR/logs" "$DIR/kubectl-cache" "$DIR/watchdog.pid" "$DIR/up.done"
    mkdir -p "$DIR/logs"
    : >"$DIR/pids"
    # A failed `up` stops whatever it had started.
    UP_OK=0
    trap 'up_exit' EXIT
    if [[ -n $owner ]]; then
        UP_OWNER=$owner
        start_watchdog "$owner"
    fi

    local apiserver
    apiserver=$(cmd_path)
    command -v etcd >/dev/null || die "etcd not on PATH: run '$0 install'"

    step "keys and token"
    TOKEN=$(openssl rand -hex 24)
    echo "$TOKEN,admin,admin,system:masters" >"$DIR/token.csv"
    openssl genrsa -out "$DIR/sa.key" 2048 2>/dev/null || die "openssl genrsa failed"
    chmod 600 "$DIR/token.csv" "$DIR/sa.key"

    local ports=()
    mapfile -t ports < <(free_ports $((n + 2)))
    [[ ${#ports[@]} -eq $((n + 2)) ]] || die "could not pick $((n + 2)) free ports"
    local etcd_port=${ports[0]} etcd_peer=${ports[1]}

    step "start etcd on 127.0.0.1:$etcd_port"
    spawn etcd "$DIR/logs/etcd.log" etcd --name e2e --data-dir "$DIR/etcd" \
        --listen-client-urls "http://127.0.0.1:$etcd_port" \
        --advertise-client-urls "http://127.0.0.1:$etcd_port" \
        --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
        --initial-cluster "e2e=http://127.0.0.1:$etcd_peer"
    wait_http etcd "$(awk '$2 == "etcd" {print $1}' "$DIR/pids")" "$DIR/logs/etcd.log" \
        "http://127.0.0.1:$etcd_port/health"

    {
        echo "# Written by controlplane.sh up; shell-sourceable."
        echo "N=$n"
        echo "TOKEN=$TOKEN"
        echo "ETCD_PORT=$etcd_port"
    } >"$DIR/env"

    webhook_client_identity

    local i port extra_args=() own_args
    read -r -a extra_args <<<"${APISERVER_EXTRA_ARGS:-}"
    for ((i = 0; i < n; i++)); do
        port=${ports[$((i + 2))]}
        own_args=()
        # Only the Karmada control plane calls our webhooks.
        if [[ $i -eq 0 ]]; then
            own_args=(--admission-control-config-file "$DIR/webhook-client/admission-config.yaml")
        fi
        step "start kube-apiserver $i on 127.0.0.1:$port (etcd prefix /cluster$i)"
        mkdir -p "$DIR/apiserver-$i"
        # --endpoint-reconciler-type none: the default reconciler would write 127.0.0.1
        # into the kubernetes Endpoints, which validation rejects (log noise every 10 s).
        spawn "apiserver-$i" "$DIR/logs/apiserver-$i.log" "$apiserver" \
            --etcd-servers "http://127.0.0.1:$etcd_port" \
            --etcd-prefix "/cluster$i" \
            --bind-address 127.0.0.1 \
            --secure-port "$port" \
            --cert-dir "$DIR/apiserver-$i" \
            --token-auth-file "$DIR/token.csv" \
            --authorization-mode RBAC \
            --service-account-issuer https://kubernetes.default.svc \
            --service-account-key-file "$DIR/sa.key" \
            --service-account-signing-key-file "$DIR/sa.key" \
            --service-cluster-ip-range 10.96.0.0/16 \
            --disable-admission-plugins ServiceAccount \
            --endpoint-reconciler-type none \
            --profiling=false \
            "${own_args[@]}" \
            "${extra_args[@]}"
        echo "APISERVER_${i}_PORT=$port" >>"$DIR/env"
    done
    for ((i = 0; i < n; i++)); do
        port=${ports[$((i + 2))]}
        step "wait for kube-apiserver $i /readyz"
        wait_http "kube-apiserver $i" "$(awk -v n="apiserver-$i" '$2 == n {print $1}' "$DIR/pids")" \
            "$DIR/logs/apiserver-$i.log" "https://127.0.0.1:$port/readyz" \
            -k -H "Authorization: Bearer $TOKEN"
        write_kubeconfig "$i" "$port"
    done

    install_crds
    UP_OK=1
    step "up in $((SECONDS - t0)) s: $DIR (kubeconfig-0 .. kubeconfig-$((n - 1)))"
}

cmd_down() {
    [[ $# -eq 1 ]] || usage
    if [[ ! -d $1 ]]; then
        echo "==> down: $1 does not exist; nothing to stop" >&2
        return 0
    fi
    DIR=$(cd "$1" && pwd)
    step "down $DIR"
    local pids=() names=() pid name
    if [[ -f $DIR/watchdog.pid ]]; then
        pid=$(cat "$DIR/watchdog.pid")
        # The watchdog execs `down` itself: never signal our own pid.
        if [[ $pid != "$$" ]] && pid_ours "$pid"; then
            pids+=("$pid")
            names+=(watchdog)
        fi
    fi
    if [[ -f $DIR/pids ]]; then
        while read -r pid name; do
            if [[ -n $pid ]] && pid_ours "$pid"; then
                pids+=("$pid")
                names+=("$name")
            fi
        done <"$DIR/pids"
    fi
    if [[ ${#pids[@]} -eq 0 ]]; then
        echo "    nothing running" >&2
        return 0
    fi
    echo "    TERM ${names[*]} (${pids[*]})" >&2
    kill -TERM "${pids[@]}" 2>/dev/null || true
    local deadline=$((SECONDS + 10)) alive
    while :; do
        alive=()
        for pid in "${pids[@]}"; do
            if pid_alive "$pid"; then alive+=("$pid"); fi
        done
        [[ ${#alive[@]} -eq 0 ]] && break
        if ((SECONDS >= deadline)); then
            echo "    KILL ${alive[*]} (still running after 10 s)" >&2
            kill -KILL "${alive[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.2
    done
    echo "    stopped" >&2
}

# ---------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------
usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

main() {
    [[ $# -ge 1 ]] || usage
    local verb=$1
    shift
    case $verb in
    install) cmd_install "$@" ;;
    path) cmd_path "$@" ;;
    up) cmd_up "$@" ;;
    down) cmd_down "$@" ;;
    -h | --help | help) usage ;;
    *) usage ;;
    esac
}

main "$@"
