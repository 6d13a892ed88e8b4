#!/usr/bin/env bash
# What users feel, measured with real Karmada: N Deployments applied to the Karmada
# apiserver, timed until every ResourceBinding is Scheduled and every Deployment exists in
# the members it was scheduled to, in three modes alternated round by round in ONE run:
#
#   none         no quota in the namespace (the project's webhook is not registered and its
#                controller does not run)
#   project      a KarmadaQuota that fits; the project's webhook (registered for bindings as
#                deployed) and controller running
#   hop          (opt-in: BENCH_MODES) the project's webhook and controller running as in
#                project, but no quota in the namespace: what the admission hop and the
#                controller's watches cost alone, so project − hop is what the quota costs
#   project-validating  (opt-in: BENCH_MODES) project with the validating webhooks alone,
#                the waiting line's mutating webhook not registered: project − this is
#                what the arrivals review costs
#   project-creates-only  (opt-in: BENCH_MODES) project with the binding webhook registered
#                for CREATE alone: what a kube-apiserver 1.28+ sends for this workload with the
#                chart's matchConditions (charge-may-rise), which hold back every UPDATE of it
#                (the scheduler's placement, Karmada's finalizers: the replay of its recorded
#                reviews, bench/RESULTS.md "Which reviews matchConditions hold back"). An
#                emulation: this bench's kube-apiserver is 1.20, which evaluates no
#                matchConditions
#   project-linger  (opt-in: BENCH_MODES) project with the webhook's --batch-linger
#                $BENCH_LINGER: project − this is what gathering admissions into fewer
#                batches saves (the webhook is restarted when the mode's flags change)
#   karmada-frq  Karmada's own FederatedResourceQuota (spec.overall) that fits, with its
#                FederatedQuotaEnforcement gate on (the gate is on for every mode: it costs
#                nothing where no FederatedResourceQuota exists)
#
# Per round and mode: seconds, the ratio to none of the same round, the Karmada apiserver's
# CPU seconds per binding (from /proc of the control plane's apiserver 0), and for project
# the webhook's reviews and its p99 as the apiserver saw it; then the same of the round's
# deletion (Deployments and bindings deleted until Karmada has removed its finalizers and
# the members' copies: its apiserver CPU and the webhook calls it made). Karmada's control plane comes
# from hack/e2e-karmada.sh --up-only (same inputs); it is started once per throttle setting:
#
#   default   Karmada's defaults (the controller-manager's client: 40 requests/s, burst 60)
#   lifted    --kube-api-qps=1000 --kube-api-burst=2000 for the controller-manager and the
#             scheduler, as large installations run them
#
#   bench/karmada.sh                    # (or: make bench-karmada)
#
# Inputs (environment): KARMADA_SRC, KARMADA_BIN_DIR, KARMADA_VERSION as hack/e2e-karmada.sh
# (default v1.18.2 here: FederatedQuotaEnforcement needs v1.14+ and the validating
# resourcebinding webhook of Karmada's configuration), and
#   KARMADA_FEATURE_GATES  default FederatedQuotaEnforcement=true (extra gates: append)
#   BENCH_N                Deployments per round (default 200)
#   BENCH_ROUNDS           rounds per throttle setting (default 3)
#   BENCH_THROTTLE         default | lifted | both (default both)
#   BENCH_MODES            default "none project karmada-frq" (also: hop; none is required)
#   BENCH_TIMEOUT          seconds one round may take before it counts as failed (default 600)
#   BENCH_LINGER           the webhook's --batch-linger in project-linger (default 50ms)
#   BENCH_ARRIVALS         1 (default): the waiting line's mutating webhook is registered
#                          too, as the chart does by default; 0: the validating ones alone
#                          (as runs before 2026-11-29 measured)
#   BENCH_LINE_LABELS      1 (default): as the chart's webhook.queueing.labelNamespaces, the
#                          mutating webhook only for namespaces labelled
#                          quota.karmada.io/waiting-line=true and the controller keeping that
#                          label (--label-line-namespaces; no quota here queues, so no
#                          namespace gets it); 0: every namespace (runs before 2026-11-30,
#                          and binaries without the flag)
#   BENCH_BATCH_NAMESPACE  where the reservation batches live (default karmada-system, where
#                          the chart's apiserver part puts them in a Karmada install: a
#                          namespace Karmada's resource detector leaves alone; any other makes
#                          the detector read back every deleted batch, one GET each)
#   BENCH_KARMADA_ARGS     extra karmada-controller-manager flags for every mode (e.g.
#                          --skipped-propagating-apis=quota.karmada.io, docs/karmada.md)
#   BENCH_DIR              work directory (default target/bench-karmada)
#   BIN_DIR                the project's binaries to run (default: release build, made here)
#   BENCH_RECORD_REVIEWS   a file: the webhook is registered through bench/review-recorder.py,
#                          which appends every AdmissionReview sent to it and the answer (a
#                          record of what the apiserver sends, for the matchConditions replay;
#                          the recorder's own hop is in the times of such a run)
#   BENCH_PPROF_SECONDS    take a CPU profile of the measured apiserver for this many seconds
#                          from the start of each round's creates (its /debug/pprof/profile,
#                          read by `kubectl get --raw`; the apiservers then start with
#                          --profiling=true), saved as $BENCH_DIR/pprof/<ns>.pb.gz (read
#                          with `go tool pprof`; the profile's own cost is in the round's
#                          CPU, the same in every mode)
#
# Results: one JSON line per round in $BENCH_DIR/results.jsonl and a Markdown table on
# stdout (paste it into bench/RESULTS.md with the machine and the command). Everything
# listens on 127.0.0.1; the script stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# Certificates, CPU accounting, scrapes, log/die: shared with the other benches.
# shellcheck source=bench/lib.sh
source bench/lib.sh

export KARMADA_VERSION=${KARMADA_VERSION:-v1.18.2}
export KARMADA_FEATURE_GATES=${KARMADA_FEATURE_GATES:-FederatedQuotaEnforcement=true}
N=${BENCH_N:-200}
ROUNDS=${BENCH_ROUNDS:-3}
THROTTLE=${BENCH_THROTTLE:-both}
read -r -a MODES <<<"${BENCH_MODES:-none project karmada-frq}"
TIMEOUT=${BENCH_TIMEOUT:-600}
ARRIVALS=${BENCH_ARRIVALS:-1}
LINE_LABELS=${BENCH_LINE_LABELS:-1}
CONTROLLER_FLAGS=()
[[ $LINE_LABELS == 1 ]] && CONTROLLER_FLAGS+=(--label-line-namespaces)
LINGER=${BENCH_LINGER:-50ms}
PPROF_SECONDS=${BENCH_PPROF_SECONDS:-}
if [[ -n $PPROF_SECONDS ]]; then
    # e2e/controlplane starts the apiservers with --profiling=false; the last flag wins.
    export APISERVER_EXTRA_ARGS="${APISERVER_EXTRA_ARGS:-} --profiling=true"
fi
WORK=${BENCH_DIR:-$root/target/bench-karmada}
# The reservation batches live where the chart puts them (BENCH_BATCH_NAMESPACE); the store
# is named for builds from before the one store (BIN_DIR), whose default was the status store.
BATCH_NS=${BENCH_BATCH_NAMESPACE:-karmada-system}
STORE_FLAGS=(--reservation-store batches --reservation-namespace "$BATCH_NS")
BIN=${BIN_DIR:-${CARGO_TARGET_DIR:-$root/target}/release}
RESULTS=$WORK/results.jsonl
KDIR=$WORK/karmada
# lib.sh's names for the control plane (Karmada's, here), certificates and logs.
CP=$KDIR
TLS=$WORK/tls
LOGS=$WORK/logs
mkdir -p "$LOGS"
case ${1:-} in
-h | --help)
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
"") ;;
*) die "unknown argument $1 (try --help)" ;;
esac
case $THROTTLE in default | lifted) throttles=("$THROTTLE") ;; both) throttles=(default lifted) ;;
*) die "BENCH_THROTTLE must be default, lifted or both, not '$THROTTLE'" ;; esac
for m in "${MODES[@]}"; do
    case $m in none | project | project-validating | project-linger | project-creates-only | hop | karmada-frq) ;; *) die "unknown mode '$m' in BENCH_MODES" ;; esac
done
[[ " ${MODES[*]} " == *" none "* ]] || die "BENCH_MODES must hold none: every ratio is to none"
[[ $N =~ ^[0-9]+$ && $N -ge 1 && $N -le 5000 ]] || die "BENCH_N must be 1..5000, not '$N'"

if [[ -n ${BIN_DIR:-} ]]; then
    log "BIN_DIR=$BIN_DIR: using its binaries, not building"
else
    log "release binaries of the webhook and the controller"
    cargo build --locked --release -p karmada-quota-webhook -p karmada-quota-controller -p karmada-quota-bench --bins
fi
for b in karmada-quota-webhook karmada-quota-controller kq-bench; do
    [[ -x $BIN/$b ]] || die "$BIN/$b missing after the build (BIN_DIR/CARGO_TARGET_DIR?)"
done

KARMADA_PID=
stop_procs() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
stop_karmada() {
    stop_procs
    if [[ -n $KARMADA_PID ]]; then
        kill -TERM "$KARMADA_PID" 2>/dev/null || true
        wait "$KARMADA_PID" 2>/dev/null || true
        KARMADA_PID=
    fi
}
trap stop_karmada EXIT
trap 'exit 130' INT TERM

k() { # k <apiserver index> kubectl-args…
    local i=$1
    shift
    kubectl --kubeconfig "$KDIR/kubeconfig-$i" --cache-dir "$KDIR/kubectl-cache" "$@"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

wait_200() { # url what
    for _ in $(seq 1 300); do
        curl -fsS -o /dev/null --max-time 2 "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    die "$2 never answered 200 at $1"
}

start_karmada() { # throttle
    local extra=""
    [[ $1 == lifted ]] && extra="--kube-api-qps=1000 --kube-api-burst=2000"
    log "Karmada $KARMADA_VERSION (gates $KARMADA_FEATURE_GATES, throttle $1${BENCH_KARMADA_ARGS:+, $BENCH_KARMADA_ARGS}) in $KDIR"
    rm -rf "$KDIR"
    KARMADA_RUN_DIR=$KDIR KARMADA_SKIP_BUILD=1 \
        KARMADA_CONTROLLER_MANAGER_ARGS="$extra ${BENCH_KARMADA_ARGS:-}" KARMADA_SCHEDULER_ARGS=$extra \
        setsid hack/e2e-karmada.sh --up-only >"$LOGS/karmada-up-$1.log" 2>&1 &
    KARMADA_PID=$!
    for _ in $(seq 1 600); do
        grep -q '^KARMADA_WEBHOOK_PORT=' "$KDIR/env" 2>/dev/null && return 0
        kill -0 "$KARMADA_PID" 2>/dev/null || {
            tail -n 30 "$LOGS/karmada-up-$1.log" >&2
            die "hack/e2e-karmada.sh --up-only stopped; see $LOGS/karmada-up-$1.log"
        }
        sleep 0.5
    done
    die "Karmada did not come up in 300 s; see $LOGS/karmada-up-$1.log"
}

# The project's webhook (lib.sh's serving certificate for 127.0.0.1) and, for project
# rounds, its controller, both against the Karmada apiserver with the admin kubeconfig.
WEBHOOK_PID=
WEBHOOK_FLAGS_NOW=
CONTROLLER_PID=
start_webhook() { # log-name extra-flags...
    WEBHOOK_PORT=$(free_port)
    WEBHOOK_ADMIN=$(free_port)
    "$BIN/karmada-quota-webhook" --listen "127.0.0.1:$WEBHOOK_PORT" --admin-listen "127.0.0.1:$WEBHOOK_ADMIN" \
        --kubeconfig "$KDIR/kubeconfig-0" --tls-cert-file "$TLS/tls.pem" --tls-private-key-file "$TLS/tls.key" \
        --log warn "${STORE_FLAGS[@]}" "${@:2}" >>"$LOGS/webhook-$1.log" 2>&1 &
    WEBHOOK_PID=$!
    PIDS+=("$WEBHOOK_PID")
    wait_200 "http://127.0.0.1:$WEBHOOK_ADMIN/readyz" webhook
    HOOK_PORT=$WEBHOOK_PORT
    [[ -n ${BENCH_RECORD_REVIEWS:-} ]] || return 0
    HOOK_PORT=$(free_port)
    python3 bench/review-recorder.py --listen "127.0.0.1:$HOOK_PORT" --upstream "https://127.0.0.1:$WEBHOOK_PORT" \
        --cert "$TLS/tls.pem" --key "$TLS/tls.key" --ca "$TLS/ca.pem" --out "$BENCH_RECORD_REVIEWS" \
        >"$LOGS/recorder-$1.log" 2>&1 &
    PIDS+=("$!")
    for _ in $(seq 1 50); do
        curl -s -o /dev/null --max-time 2 --cacert "$TLS/ca.pem" "https://127.0.0.1:$HOOK_PORT/" && return 0
        sleep 0.2
    done
    die "bench/review-recorder.py never answered on 127.0.0.1:$HOOK_PORT"
}
stop_webhook() {
    [[ -n $WEBHOOK_PID ]] || return 0
    kill "$WEBHOOK_PID" 2>/dev/null || true
    wait "$WEBHOOK_PID" 2>/dev/null || true
    WEBHOOK_PID=
}
# The webhook with the flags of a mode, restarted only when they differ from the running one's.
webhook_flags() { [[ $1 == project-linger ]] && echo "--batch-linger $LINGER" || true; }
ensure_webhook() { # throttle mode
    local want
    want=$(webhook_flags "$2")
    [[ -n $WEBHOOK_PID && $want == "$WEBHOOK_FLAGS_NOW" ]] && return 0
    stop_webhook
    # shellcheck disable=SC2086 # the flags are words
    start_webhook "$1" $want
    WEBHOOK_FLAGS_NOW=$want
}
start_controller() {
    CONTROLLER_ADMIN=$(free_port)
    "$BIN/karmada-quota-controller" --kubeconfig "$KDIR/kubeconfig-0" --admin-listen "127.0.0.1:$CONTROLLER_ADMIN" \
        --dashboard-listen "127.0.0.1:$(free_port)" --no-leader-election --log warn "${STORE_FLAGS[@]}" "${CONTROLLER_FLAGS[@]}" \
        >>"$LOGS/controller-$1.log" 2>&1 &
    CONTROLLER_PID=$!
    PIDS+=("$CONTROLLER_PID")
    wait_200 "http://127.0.0.1:$CONTROLLER_ADMIN/readyz" controller
}
stop_controller() {
    [[ -n $CONTROLLER_PID ]] || return 0
    kill "$CONTROLLER_PID" 2>/dev/null || true
    wait "$CONTROLLER_PID" 2>/dev/null || true
    CONTROLLER_PID=
}
# The webhooks the chart registers: the validating ones and, with the waiting line on (the
# chart's default, webhook.queueing.enabled), the mutating one of arrivals.
# The project's processes run in these modes.
runs_project() { [[ $1 == project || $1 == hop || $1 == project-validating || $1 == project-linger || $1 == project-creates-only ]]; }
register_webhook() { # arrivals (1: the mutating webhook too), creates_only (1: bindings' CREATE alone)
    local manifests=(webhook/manifests/validatingwebhookconfiguration.yaml) m i=0 ops=()
    [[ $1 == 1 ]] && manifests+=(webhook/manifests/mutatingwebhookconfiguration.yaml)
    # The first rule of the manifest is the bindings' (CREATE, UPDATE).
    [[ ${2:-0} == 1 ]] && ops=(-e '0,/operations: \["CREATE", "UPDATE"\]/s//operations: ["CREATE"]/')
    for m in "${manifests[@]}"; do
        sed -e "s#\${WEBHOOK_URL}#https://127.0.0.1:$HOOK_PORT#" -e "s#\${CA_BUNDLE}#$(base64 -w0 <"$TLS/ca.pem")#" \
            -e 's/^  name: karmada-quota$/  name: kq-bench/' "${ops[@]}" "$m" >"$WORK/webhooks-$i.yaml"
        if [[ $m == *mutating* && $LINE_LABELS == 1 ]]; then
            # The chart's selector with webhook.queueing.labelNamespaces (its default).
            cat >>"$WORK/webhooks-$i.yaml" <<'EOF'
    namespaceSelector:
      matchExpressions:
        - {key: quota.karmada.io/waiting-line, operator: In, values: ["true"]}
EOF
        fi
        k 0 apply -f "$WORK/webhooks-$i.yaml" >/dev/null
        i=$((i + 1))
    done
}
unregister_webhook() {
    k 0 delete validatingwebhookconfiguration kq-bench --ignore-not-found >/dev/null
    k 0 delete mutatingwebhookconfiguration kq-bench --ignore-not-found >/dev/null
}

# The workload of one round: namespace, policy (Divided by static weight 1:1 over both
# members), the mode's quota, N Deployments of 1 replica × 100m.
prepare() { # ns mode
    local ns=$1 mode=$2 f=$WORK/$1.yaml
    k 0 create namespace "$ns" >/dev/null
    cat >"$f" <<EOF
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata: {name: bench, namespace: $ns}
spec:
  resourceSelectors:
    - {apiVersion: apps/v1, kind: Deployment, labelSelector: {matchLabels: {app: bench}}}
  placement:
    clusterAffinity: {clusterNames: [member1, member2]}
    replicaScheduling:
      replicaSchedulingType: Divided
      replicaDivisionPreference: Weighted
      weightPreference:
        staticWeightList:
          - {targetCluster: {clusterNames: [member1]}, weight: 1}
          - {targetCluster: {clusterNames: [member2]}, weight: 1}
EOF
    k 0 apply -f "$f" >/dev/null
    case $mode in
    project | project-validating | project-linger | project-creates-only)
        k 0 apply -f - >/dev/null <<EOF
apiVersion: quota.karmada.io/v1alpha1
kind: KarmadaQuota
metadata: {name: bench, namespace: $ns}
spec:
  hard: {requests.cpu: "$((N))", pods: "$((N * 2))"}
EOF
        for _ in $(seq 1 300); do
            [[ -n $(k 0 get kquota bench -n "$ns" -o 'jsonpath={.status.used}' 2>/dev/null) ]] && break
            sleep 0.2
        done
        ;;
    karmada-frq)
        k 0 apply -f - >/dev/null <<EOF
apiVersion: policy.karmada.io/v1alpha1
kind: FederatedResourceQuota
metadata: {name: bench, namespace: $ns}
spec:
  overall: {cpu: "$((N))", pods: "$((N * 2))"}
EOF
        for _ in $(seq 1 300); do
            [[ -n $(k 0 get federatedresourcequota bench -n "$ns" -o 'jsonpath={.status.overall}' 2>/dev/null) ]] && break
            sleep 0.2
        done
        ;;
    esac
    python3 - "$ns" "$N" >"$WORK/$ns-deployments.yaml" <<'PY'
import sys
ns, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    print(f"""---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: d{i:05d}, namespace: {ns}, labels: {{app: bench}}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: bench, i: "{i}"}}}}
  template:
    metadata: {{labels: {{app: bench, i: "{i}"}}}}
    spec:
      containers:
        - {{name: c, image: bench/pause:3, resources: {{requests: {{cpu: 100m}}}}}}""")
PY
}

# Seconds until every binding is Scheduled and every member it names runs its Deployment.
# Prints "<scheduled> <expected member objects> <present member objects>" while waiting.
progress() { # ns
    local rb
    rb=$(k 0 get resourcebindings -n "$1" -o json 2>/dev/null |
        jq -r '[.items[] | select(any(.status.conditions[]?; .type == "Scheduled" and .status == "True"))] |
               "\(length) \(map(.spec.clusters // [] | length) | add // 0)"') || rb="0 0"
    local m1 m2
    m1=$(k 1 get deployments -n "$1" --no-headers 2>/dev/null | wc -l)
    m2=$(k 2 get deployments -n "$1" --no-headers 2>/dev/null | wc -l)
    echo "$rb $((m1 + m2))"
}

cleanup_round() { # ns
    k 0 delete deployments --all -n "$1" --wait=false >/dev/null 2>&1 || true
    # No garbage collector runs (hack/e2e-karmada.sh): delete the bindings as it would.
    k 0 delete resourcebindings --all -n "$1" --wait=false >/dev/null 2>&1 || true
    # Until the members' Deployments are gone and Karmada has removed its finalizers from
    # every binding (its last writes of them, reviewed while the webhook is registered).
    for _ in $(seq 1 120); do
        local left
        left=$(($(k 1 get deployments -n "$1" --no-headers 2>/dev/null | wc -l) + $(k 2 get deployments -n "$1" --no-headers 2>/dev/null | wc -l)))
        left=$((left + $(k 0 get resourcebindings -n "$1" --no-headers 2>/dev/null | wc -l)))
        [[ $left -eq 0 ]] && break
        sleep 0.5
    done
}

run_round() { # throttle round mode
    local throttle=$1 round=$2 mode=$3 ns="bk-${1}-r$2-$3"
    log "[$throttle round $round] $mode: $N Deployments in $ns"
    if runs_project "$mode"; then
        ensure_webhook "$throttle" "$mode"
        start_controller "$throttle"
        case $mode in
        project-validating) register_webhook 0 ;;
        project-creates-only) register_webhook "$ARRIVALS" 1 ;;
        *) register_webhook "$ARRIVALS" ;;
        esac
    else
        unregister_webhook
    fi
    prepare "$ns" "$mode"
    sleep 2 # let the informers settle after the setup writes
    local api_pid before after t0 t1 p
    api_pid=$(cp_pid apiserver-0)
    scrape_all "$WORK/scrape/$ns-before"
    before=$(cpu_ticks "$api_pid")
    t0=$(date +%s.%N)
    local pprof_pid=
    if [[ -n $PPROF_SECONDS ]]; then
        mkdir -p "$WORK/pprof"
        k 0 get --raw "/debug/pprof/profile?seconds=$PPROF_SECONDS" >"$WORK/pprof/$ns.pb.gz" 2>/dev/null &
        pprof_pid=$!
    fi
    k 0 create -f "$WORK/$ns-deployments.yaml" >/dev/null
    local ok=0
    while true; do
        p=$(progress "$ns")
        read -r scheduled expected present <<<"$p"
        if [[ $scheduled -eq $N && $expected -ge $N && $present -eq $expected ]]; then
            ok=1
            break
        fi
        if (($(date +%s) - ${t0%.*} > TIMEOUT)); then
            log "    timed out: scheduled $scheduled/$N, in members $present/$expected"
            break
        fi
        sleep 0.5
    done
    t1=$(date +%s.%N)
    after=$(cpu_ticks "$api_pid")
    if [[ -n $pprof_pid ]] && ! wait "$pprof_pid"; then
        log "    no CPU profile of the apiserver (/debug/pprof/profile failed)"
    fi
    scrape_all "$WORK/scrape/$ns-after"
    local m='{}'
    if runs_project "$mode"; then
        m=$("$BIN/kq-bench" metrics-delta --before "$WORK/scrape/$ns-before/webhook.prom" \
            --after "$WORK/scrape/$ns-after/webhook.prom" --counter reviews=kq_webhook_decisions_total \
            --counter batches=kq_webhook_reservation_batch_creates_total \
            --histogram confirm_s=kq_webhook_reservation_batch_confirm_seconds)
        local a
        a=$("$BIN/kq-bench" metrics-delta --before "$WORK/scrape/$ns-before/apiserver.prom" \
            --after "$WORK/scrape/$ns-after/apiserver.prom" \
            --histogram admission_s='apiserver_admission_webhook_admission_duration_seconds|name="resourcebindings.quota.karmada.io"')
        m=$(jq -cn --argjson w "$m" --argjson a "$a" '$w + {p99_s: $a.admission_s.p99, calls: $a.admission_s.count}')
    fi
    local line
    line=$(jq -cn --arg throttle "$throttle" --argjson round "$round" --arg mode "$mode" --argjson n "$N" \
        --argjson ok "$ok" --argjson secs "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')" \
        --argjson cpu "$(awk -v a="$before" -v b="$after" -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN {printf "%.5f", (b - a) / hz / n}')" \
        --argjson m "$m" --arg version "$KARMADA_VERSION" --argjson t0 "$t0" --argjson t1 "$t1" \
        '{version: $version, throttle: $throttle, round: $round, mode: $mode, n: $n, ok: ($ok == 1),
          seconds: $secs, apiserver_cpu_s_per_binding: $cpu, project: $m, start: $t0, end: $t1}')
    log "    $(jq -r '"\(.seconds) s, apiserver \(.apiserver_cpu_s_per_binding * 1000 | floor) ms CPU/binding"' <<<"$line")"
    # The deletion: its own time and apiserver CPU, and the webhook calls it made (Karmada
    # removing its finalizers from the deleted bindings).
    local c0 c1 d0 d1 calls=null
    c0=$(cpu_ticks "$api_pid")
    d0=$(date +%s.%N)
    cleanup_round "$ns"
    d1=$(date +%s.%N)
    c1=$(cpu_ticks "$api_pid")
    if runs_project "$mode"; then
        scrape_all "$WORK/scrape/$ns-deleted"
        calls=$("$BIN/kq-bench" metrics-delta --before "$WORK/scrape/$ns-after/apiserver.prom" \
            --after "$WORK/scrape/$ns-deleted/apiserver.prom" \
            --histogram admission_s='apiserver_admission_webhook_admission_duration_seconds|name="resourcebindings.quota.karmada.io"' |
            jq '.admission_s.count')
    fi
    line=$(jq -c --argjson secs "$(awk -v a="$d0" -v b="$d1" 'BEGIN {printf "%.2f", b - a}')" \
        --argjson cpu "$(awk -v a="$c0" -v b="$c1" -v hz="$(getconf CLK_TCK)" -v n="$N" 'BEGIN {printf "%.5f", (b - a) / hz / n}')" \
        --argjson calls "$calls" '. + {deletion: {seconds: $secs, apiserver_cpu_s_per_binding: $cpu, calls: $calls}}' <<<"$line")
    echo "$line" >>"$RESULTS"
    log "    deleted in $(jq -r '"\(.deletion.seconds) s, apiserver \(.deletion.apiserver_cpu_s_per_binding * 1000 | floor) ms CPU/binding"' <<<"$line")"
    if runs_project "$mode"; then
        unregister_webhook
        stop_controller
    fi
}

: >"$RESULTS"
make_certs
for throttle in "${throttles[@]}"; do
    start_karmada "$throttle"
    k 0 get namespace "$BATCH_NS" >/dev/null 2>&1 || k 0 create namespace "$BATCH_NS" >/dev/null
    for round in $(seq 1 "$ROUNDS"); do
        # Alternate the order round by round, so that no mode always runs first.
        ordered=("${MODES[@]}")
        if ((round % 2 == 0)); then
            ordered=()
            for ((i = ${#MODES[@]} - 1; i >= 0; i--)); do ordered+=("${MODES[i]}"); done
        fi
        for mode in "${ordered[@]}"; do run_round "$throttle" "$round" "$mode"; done
    done
    stop_webhook
    stop_karmada
done
trap - EXIT

# The table: per round, seconds and CPU per binding, and the ratios to none of that round.
jq -rs '
  def r(x; y): if y == 0 or y == null or x == null then "n/a" else ((x / y * 100 | round) / 100 | tostring) end;
  "| Karmada | throttle | round | mode | ok | seconds | × none | apiserver CPU ms/binding | × none | reviews | p99 (s) | deletion: apiserver CPU ms/binding | × none | webhook calls |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  (group_by([.throttle, .round])[] as $g
   | ($g | map(select(.mode == "none")) | first) as $none
   | $g[] | "| \(.version) | \(.throttle) | \(.round) | \(.mode) | \(.ok) | \(.seconds) | \(r(.seconds; $none.seconds)) | \(.apiserver_cpu_s_per_binding * 1000 | . * 10 | round / 10) | \(r(.apiserver_cpu_s_per_binding; $none.apiserver_cpu_s_per_binding)) | \(.project.reviews // "") | \(.project.p99_s // "" | if type == "number" then (. * 1000 | round / 1000) else . end) | \(.deletion.apiserver_cpu_s_per_binding // 0 | . * 10000 | round / 10) | \(r(.deletion.apiserver_cpu_s_per_binding; $none.deletion.apiserver_cpu_s_per_binding)) | \(.deletion.calls // "") |")
' "$RESULTS"
jq -rs '
  def median: sort | if length == 0 then null elif length % 2 == 1 then .[length / 2 | floor] else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  "",
  "Medians over rounds of the ratio to none (same round); the project'"'"'s reservation store: batches",
  (group_by(.throttle)[] as $t
   | ($t | group_by(.round) | map((map(select(.mode == "none")) | first) as $none
        | map({mode, s: (.seconds / $none.seconds), c: (.apiserver_cpu_s_per_binding / $none.apiserver_cpu_s_per_binding),
               d: (.deletion.apiserver_cpu_s_per_binding / $none.deletion.apiserver_cpu_s_per_binding)})) | flatten) as $rs
   | ($rs | group_by(.mode)[] | "  \($t[0].throttle): \(.[0].mode): wall × \(map(.s) | median * 100 | round / 100), apiserver CPU × \(map(.c) | median * 100 | round / 100); deletion: apiserver CPU × \(map(.d) | median * 100 | round / 100)"))
' "$RESULTS"
