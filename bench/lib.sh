# shellcheck shell=bash
# Shared by p1-creates.sh and p2-webhook.sh: a one-apiserver control plane, certificates,
# the release binaries as background processes, the webhook's registration, medians.
# Sourced, not run. Everything listens on 127.0.0.1; `bench_cleanup` (an EXIT trap) stops
# exactly the processes started here and brings the control plane down.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly REPO
BIN=${BIN_DIR:-$REPO/target/release}
WORK=${BENCH_DIR:-$REPO/target/bench}
CP=$WORK/cp
TLS=$WORK/tls
LOGS=$WORK/logs
KQ_LOAD=$BIN/kq-load
KQ_BENCH=$BIN/kq-bench
PIDS=()

log() { echo "==> $*" >&2; }
die() {
    echo "bench: $*" >&2
    exit 1
}

require_binaries() {
    local b
    for b in karmada-quota-webhook kq-load kq-bench; do
        [[ -x $BIN/$b ]] || die "$BIN/$b missing: cargo build --release --bins"
    done
    command -v jq >/dev/null || die "jq missing (controlplane.sh install brings it)"
    command -v openssl >/dev/null || die "openssl missing"
}

# Control plane: etcd + one apiserver (the Karmada control plane with the CRDs).
bench_up() {
    mkdir -p "$WORK" "$LOGS"
    if [[ -f $CP/pids ]]; then
        "$REPO/e2e/controlplane/controlplane.sh" down "$CP" >/dev/null 2>&1 || true
    fi
    rm -rf "$CP"
    log "control plane (1 apiserver) in $CP"
    "$REPO/e2e/controlplane/controlplane.sh" up "$CP" 1 >"$LOGS/controlplane-up.log" 2>&1 ||
        die "controlplane.sh up failed; see $LOGS/controlplane-up.log"
    export KUBECONFIG=$CP/kubeconfig-0
    # Where the binaries keep their reservation batches unless a bench names another
    # namespace (--reservation-namespace's default): without it every admission fails.
    kubectl_ create namespace karmada-quota-system
}

bench_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [[ -f $CP/pids ]]; then
        log "control plane down"
        "$REPO/e2e/controlplane/controlplane.sh" down "$CP" >/dev/null 2>&1 || true
    fi
}

# kubectl against the bench apiserver; its output to stderr (minus the version-skew
# warning of a newer kubectl), and a failure stops the bench.
kubectl_() {
    local out
    out=$(kubectl --kubeconfig "$KUBECONFIG" "$@" 2>&1) || die "kubectl $*: $out"
    grep -v '^Warning: version difference' <<<"$out" >&2 || true
}

# A CA and a serving certificate for 127.0.0.1 (as the e2e fixture makes them).
make_certs() {
    mkdir -p "$TLS"
    printf '%s\n' "subjectAltName=IP:127.0.0.1" "basicConstraints=CA:FALSE" \
        "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$TLS/leaf.ext"
    local ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    openssl req -x509 "${ec[@]}" -days 30 -subj /CN=kq-bench-ca \
        -keyout "$TLS/ca.key" -out "$TLS/ca.pem" 2>/dev/null
    openssl req "${ec[@]}" -subj /CN=127.0.0.1 -keyout "$TLS/tls.key" -out "$TLS/tls.csr" 2>/dev/null
    openssl x509 -req -days 30 -set_serial 1 -in "$TLS/tls.csr" -CA "$TLS/ca.pem" \
        -CAkey "$TLS/ca.key" -extfile "$TLS/leaf.ext" -out "$TLS/tls.pem" 2>/dev/null
}

free_port() { "$KQ_LOAD" free-port; }

# HTTP status code of GET http://127.0.0.1:$1$2 (bash's /dev/tcp; 000 when unreachable).
http_code() {
    local code
    code=$( (exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'GET %s HTTP/1.0\r\n\r\n' "$2" >&3 &&
        head -1 <&3) 2>/dev/null | awk '{print $2}') || true
    echo "${code:-000}"
}

wait_http_200() { # port path what
    for _ in $(seq 1 300); do
        [[ $(http_code "$1" "$2") == 200 ]] && return 0
        sleep 0.1
    done
    die "$3: GET :$1$2 never answered 200"
}

# start_webhook NAME [flags…]: sets WEBHOOK_PORT and WEBHOOK_ADMIN.
start_webhook() {
    local name=$1
    shift
    WEBHOOK_PORT=$(free_port)
    WEBHOOK_ADMIN=$(free_port)
    "$BIN/karmada-quota-webhook" --listen "127.0.0.1:$WEBHOOK_PORT" \
        --admin-listen "127.0.0.1:$WEBHOOK_ADMIN" --kubeconfig "$KUBECONFIG" \
        --tls-cert-file "$TLS/tls.pem" --tls-private-key-file "$TLS/tls.key" \
        --log warn "$@" >"$LOGS/$name.log" 2>&1 &
    WEBHOOK_PID=$!
    PIDS+=("$WEBHOOK_PID")
    wait_http_200 "$WEBHOOK_ADMIN" /readyz "$name"
    log "$name: https://127.0.0.1:$WEBHOOK_PORT (admin :$WEBHOOK_ADMIN)"
}

# start_controller NAME [flags…]: sets CONTROLLER_ADMIN.
start_controller() {
    local name=$1
    shift
    CONTROLLER_ADMIN=$(free_port)
    "$BIN/karmada-quota-controller" --kubeconfig "$KUBECONFIG" \
        --admin-listen "127.0.0.1:$CONTROLLER_ADMIN" --no-leader-election \
        --log warn "$@" >"$LOGS/$name.log" 2>&1 &
    CONTROLLER_PID=$!
    PIDS+=("$CONTROLLER_PID")
    wait_http_200 "$CONTROLLER_ADMIN" /readyz "$name"
    log "$name: admin :$CONTROLLER_ADMIN"
}

# The manifest's configuration for every namespace (no namespaceSelector), as deployed.
register_webhook() { # port
    local ca
    ca=$(base64 -w0 <"$TLS/ca.pem")
    sed -e "s#\${WEBHOOK_URL}#https://127.0.0.1:$1#" -e "s#\${CA_BUNDLE}#$ca#" \
        -e 's/^  name: karmada-quota$/  name: kq-bench/' \
        "$REPO/webhook/manifests/validatingwebhookconfiguration.yaml" >"$WORK/vwc.yaml"
    kubectl_ apply -f "$WORK/vwc.yaml"
}

unregister_webhook() { kubectl_ delete validatingwebhookconfiguration kq-bench --ignore-not-found; }

new_namespace() { kubectl_ create namespace "$1"; }

# quota NS NAME HARD-YAML-FLOW, e.g. quota ns q '{requests.cpu: "100k", pods: "100k"}'
quota() {
    printf 'apiVersion: quota.karmada.io/v1alpha1\nkind: KarmadaQuota\nmetadata: {name: %s, namespace: %s}\nspec:\n  hard: %s\n' \
        "$2" "$1" "$3" >"$WORK/quota-$1.yaml"
    kubectl_ apply -f "$WORK/quota-$1.yaml"
}

# p3_namespaces COUNT HARD-YAML-FLOW: namespaces p3-000… with a quota `q` each; sets nss.
p3_namespaces() {
    local k ns
    nss=()
    for k in $(seq 0 $(($1 - 1))); do nss+=("$(printf 'p3-%03d' "$k")"); done
    log "$1 namespaces with a quota each"
    for ns in "${nss[@]}"; do
        printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n' "$ns"
        printf 'apiVersion: quota.karmada.io/v1alpha1\nkind: KarmadaQuota\nmetadata: {name: q, namespace: %s}\nspec:\n  hard: %s\n---\n' "$ns" "$2"
    done >"$WORK/p3-objects.yaml"
    kubectl_ apply -f "$WORK/p3-objects.yaml"
}

# wait_used NS NAME: until status.used is set (by the controller).
wait_used() {
    for _ in $(seq 1 300); do
        [[ -n $(kubectl --kubeconfig "$KUBECONFIG" get kquota "$2" -n "$1" \
            -o 'jsonpath={.status.used}' 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    die "status.used of $1/$2 never appeared"
}

# CPU time (clock ticks, user + system) a process has used so far; 0 when it is gone.
cpu_ticks() {
    if [[ ${1:-0} != 0 ]] && [[ -r /proc/$1/stat ]]; then
        awk '{print $14 + $15}' "/proc/$1/stat"
    else
        echo 0
    fi
}
cp_pid() { awk -v n="$1" '$2 == n {print $1}' "$CP/pids"; }

# cpu_snapshot: "apiserver etcd webhook controller" CPU ticks now.
cpu_snapshot() {
    echo "$(cpu_ticks "$(cp_pid apiserver-0)") $(cpu_ticks "$(cp_pid etcd)")" \
        "$(cpu_ticks "${WEBHOOK_PID:-0}") $(cpu_ticks "${CONTROLLER_PID:-0}")"
}

# cpu_json BEFORE AFTER COUNT: CPU milliseconds per request of each component, as JSON.
cpu_json() {
    local hz
    hz=$(getconf CLK_TCK)
    awk -v b="$1" -v a="$2" -v n="$3" -v hz="$hz" 'BEGIN {
        split(b, x, " "); split(a, y, " ");
        printf "{\"apiserver_ms\":%.3f,\"etcd_ms\":%.3f,\"webhook_ms\":%.3f,\"controller_ms\":%.3f}\n",
            (y[1]-x[1])*1000/hz/n, (y[2]-x[2])*1000/hz/n, (y[3]-x[3])*1000/hz/n, (y[4]-x[4])*1000/hz/n }'
}

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

# stat FILE LABEL-PREFIX FIELD: the median of FIELD over the JSON lines whose label starts
# with LABEL-PREFIX followed by '#'.
stat_median() { jq -r --arg p "$2#" "select(.label | startswith(\$p)) | .$3" "$1" | median; }
stat_sum() { jq -r --arg p "$2#" "select(.label | startswith(\$p)) | .$3" "$1" | awk '{s+=$1} END {print s+0}'; }
stat_list() { jq -r --arg p "$2#" "select(.label | startswith(\$p)) | .$3 | floor" "$1" | paste -sd' '; }
# scrape_all DIR: the /metrics of the apiserver, the webhook and the controller (those
# running) into DIR/{apiserver,webhook,controller}.prom.
scrape_all() {
    mkdir -p "$1"
    local token port
    token=$(sed -n 's/^TOKEN=//p' "$CP/env")
    port=$(sed -n 's/^APISERVER_0_PORT=//p' "$CP/env")
    curl -sk -H "Authorization: Bearer $token" "https://127.0.0.1:$port/metrics" >"$1/apiserver.prom" || :
    : >"$1/webhook.prom"
    : >"$1/controller.prom"
    if [[ -n ${WEBHOOK_ADMIN:-} ]]; then curl -s "http://127.0.0.1:$WEBHOOK_ADMIN/metrics" >"$1/webhook.prom" || :; fi
    if [[ -n ${CONTROLLER_ADMIN:-} ]] && [[ -n ${CONTROLLER_PID:-} ]] && kill -0 "$CONTROLLER_PID" 2>/dev/null; then
        curl -s "http://127.0.0.1:$CONTROLLER_ADMIN/metrics" >"$1/controller.prom" || :
    fi
}

# metrics_json BEFORE-DIR AFTER-DIR: what a run did, as JSON — the webhook's batch sizes,
# status writes and conflicts, its decision time; the apiserver's view of the admission
# (webhook call duration), of the quota status PUTs; the controller's writes and conflicts.
metrics_json() {
    local b=$1 a=$2 wh api ctl
    wh=$("$KQ_BENCH" metrics-delta --before "$b/webhook.prom" --after "$a/webhook.prom" \
        --histogram batch=kq_webhook_batch_size \
        --histogram decision_s=kq_webhook_decision_duration_seconds \
        --counter batches_ok='kq_webhook_reservation_batch_creates_total|result="ok"' \
        --counter conflicts='kq_webhook_reservation_batch_creates_total|result="conflict"')
    api=$("$KQ_BENCH" metrics-delta --before "$b/apiserver.prom" --after "$a/apiserver.prom" \
        --histogram admission_s='apiserver_admission_webhook_admission_duration_seconds|name="resourcebindings.quota.karmada.io"|operation="CREATE"' \
        --histogram status_put_s='apiserver_request_duration_seconds|verb="PUT"|resource="karmadaquotas"|subresource="status"' \
        --counter status_put_200='apiserver_request_total|verb="PUT"|resource="karmadaquotas"|subresource="status"|code="200"' \
        --counter status_put_409='apiserver_request_total|verb="PUT"|resource="karmadaquotas"|subresource="status"|code="409"' \
        --counter quota_get='apiserver_request_total|verb="GET"|resource="karmadaquotas"|code="200"')
    ctl=$("$KQ_BENCH" metrics-delta --before "$b/controller.prom" --after "$a/controller.prom" \
        --counter writes=kq_controller_status_writes_total \
        --counter conflicts=kq_controller_status_conflicts_total \
        --counter reconciles=kq_controller_reconciles_total)
    jq -cn --argjson wh "$wh" --argjson api "$api" --argjson ctl "$ctl" \
        '{webhook: $wh, apiserver: $api, controller: $ctl}'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0) print "n/a"; else printf "%.2f", a / b}'; }
