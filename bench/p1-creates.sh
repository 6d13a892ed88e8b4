#!/usr/bin/env bash
# P1: ResourceBinding creates per second through the apiserver, 32 concurrent
# clients, 2000 creates per run, modes alternated on one control plane:
#
#   a  into a namespace with a KarmadaQuota that admits all (status.used seeded, as the
#      controller would; no controller running: every admission adds a reservation entry)
#   b  into a namespace without a quota (the webhook's pass-through path)
#   c  with no webhook registered (the configuration deleted, the apiserver checked to no
#      longer call it)
#
# and, when karmada-quota-controller is built, a second series with the controller
# running (it computes status.used and prunes observed entries, keeping the status small):
#
#   a+ a namespace with a quota, the controller running
#   b+ a namespace without a quota, the controller running
#   c+ no webhook registered, the controller running
#
# and a third, "spread", with the controller running and the creates spread round-robin
# over SPREAD (16) namespaces:
#
#   as each namespace with its own quota
#   bs no quota in any of them
#   cs no webhook registered
#
# Both binaries reserve in batches (one KarmadaQuotaReservation per webhook decision,
# shared across namespaces) in the namespace kq-p1-batches; the store is named for builds
# from before the one store (BIN_DIR), whose default was the status store.
#
# Every run also records (from /metrics before and after it) the webhook's batch-size
# histogram, status writes and conflicts, the apiserver's admission-webhook latency and
# quota status PUTs, and the controller's writes and conflicts.
#
# Usage: bench/p1-creates.sh [ROUNDS (default 3)]
# Environment: COUNT (2000), CONCURRENCY (32), SPREAD (16), BIN_DIR (target/release),
# BENCH_DIR (target/bench), SERIES ("plain controller spread", or some of them), and any
# controller flag's KQ_* twin (e.g. KQ_MIN_WRITE_INTERVAL).
# Needs: cargo build --release --bins; the apiserver installed (controlplane.sh install).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-32}
SPREAD=${SPREAD:-16}
SERIES=${SERIES:-plain controller spread}
RESULTS=$WORK/p1-results.jsonl
ENTRIES=$WORK/p1-entries.txt
HARD='{requests.cpu: "100k", pods: "100k"}'
STORE_FLAGS=(--reservation-store batches --reservation-namespace kq-p1-batches)

require_binaries
trap bench_cleanup EXIT
bench_up
make_certs
: >"$RESULTS"
: >"$ENTRIES"

# The bench's webhook may hold every entry of a run without a controller (2000 per
# namespace; the default cap, 1000, would refuse half of mode a).
new_namespace kq-p1-batches
start_webhook webhook --max-reservations 5000 "${STORE_FLAGS[@]}"
register_webhook "$WEBHOOK_PORT"
new_namespace kq-p1-probe
"$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace kq-p1-probe \
    --admin "127.0.0.1:$WEBHOOK_ADMIN"

entries() {
    kubectl --kubeconfig "$KUBECONFIG" get karmadaquotareservations -n kq-p1-batches -o json 2>/dev/null |
        jq --arg ns "$1" '[.items[].spec.entries[] | select(.quota.namespace == $ns)] | length'
}
# Entries whose binding does not exist (admitted by the webhook, then not stored: a
# refusal after the write, e.g. a decision timeout; they lapse after the TTL).
orphans() {
    comm -13 <(kubectl --kubeconfig "$KUBECONFIG" get resourcebindings -n "$1" -o json 2>/dev/null |
        jq -r '.items[].metadata.uid' | sort) <(entry_uids "$1" | sort) | wc -l
}
entry_uids() {
    kubectl --kubeconfig "$KUBECONFIG" get karmadaquotareservations -n kq-p1-batches -o json 2>/dev/null |
        jq -r --arg ns "$1" '.items[].spec.entries[] | select(.quota.namespace == $ns) | .reservedBy.uid'
}

# run MODE ROUND: one run of COUNT creates into fresh namespaces (one, or SPREAD for the
# spread modes).
run() {
    local mode=$1 round=$2 base ns nss=() k
    base=kq-p1-${mode/+/-ctl}-$round
    if [[ $mode == ?s ]]; then
        for k in $(seq 0 $((SPREAD - 1))); do nss+=("$base-$k"); done
    else
        nss=("$base")
    fi
    for ns in "${nss[@]}"; do new_namespace "$ns"; done
    case $mode in
    a)
        quota "$base" q "$HARD"
        "$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace "$base" --quota q \
            --used requests.cpu=0,pods=0
        ;;
    a+ | as)
        for ns in "${nss[@]}"; do quota "$ns" q "$HARD"; done
        for ns in "${nss[@]}"; do wait_used "$ns" q; done
        ;;
    c | c+ | cs)
        unregister_webhook
        "$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "${nss[0]}" \
            --admin "127.0.0.1:$WEBHOOK_ADMIN" --not-called
        ;;
    esac
    if [[ $mode == a* ]]; then
        for ns in "${nss[@]}"; do "$KQ_LOAD" wait-quota --kubeconfig "$KUBECONFIG" --namespace "$ns"; done
    fi
    log "run $mode round $round: $COUNT creates into ${#nss[@]} namespace(s) $base…"
    local before line m
    scrape_all "$WORK/metrics/before"
    before=$(cpu_snapshot)
    line=$("$KQ_LOAD" creates --kubeconfig "$KUBECONFIG" --namespace "$(IFS=,; echo "${nss[*]}")" \
        --count "$COUNT" --concurrency "$CONCURRENCY" --label "$mode#$round")
    # The run's line plus the CPU each component spent per create during it, and what
    # the metrics say it did.
    local cpu
    cpu=$(cpu_json "$before" "$(cpu_snapshot)" "$COUNT")
    scrape_all "$WORK/metrics/after"
    m=$(metrics_json "$WORK/metrics/before" "$WORK/metrics/after")
    jq -c --argjson cpu "$cpu" --argjson m "$m" '. + {cpu: $cpu, m: $m}' <<<"$line" >>"$RESULTS"
    if [[ $mode == a* ]]; then
        local n=0 o=0 e x
        for ns in "${nss[@]}"; do
            e=$(entries "$ns") || e=
            x=$(orphans "$ns") || x=
            n=$((n + ${e:-0}))
            o=$((o + ${x:-0}))
        done
        echo "$mode round $round: $n reservation entries in ${#nss[@]} quota(s) right after the run," \
            "$o of them for no stored binding" >>"$ENTRIES"
    fi
    if [[ $mode == c* ]]; then
        register_webhook "$WEBHOOK_PORT"
        "$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "${nss[0]}" \
            --admin "127.0.0.1:$WEBHOOK_ADMIN"
    fi
}

series() { # modes…
    local round mode
    for round in $(seq 1 "$ROUNDS"); do
        for mode in "$@"; do
            run "$mode" "$round"
        done
    done
}

modes=()
if [[ " $SERIES " == *" plain "* ]]; then
    series a b c
    modes+=(a b c)
fi
if [[ " $SERIES " == *" controller "* || " $SERIES " == *" spread "* ]]; then
    if [[ -x $BIN/karmada-quota-controller ]]; then
        start_controller controller "${STORE_FLAGS[@]}"
        if [[ " $SERIES " == *" controller "* ]]; then
            series a+ b+ c+
            modes+=(a+ b+ c+)
        fi
        if [[ " $SERIES " == *" spread "* ]]; then
            series as bs cs
            modes+=(as bs cs)
        fi
    else
        log "no $BIN/karmada-quota-controller: the controller and spread series are skipped"
    fi
fi

echo
echo "P1: ResourceBinding creates/s, $COUNT per run, $CONCURRENCY concurrent, $ROUNDS rounds (median)"
echo "adm = the apiserver's admission-webhook call (ms); batch = requests per webhook batch (mean);"
echo "wh/ctl w:c = writes (webhook: batch creates) : conflicts (sums over the runs)"
printf '%-4s %-22s %6s %6s %6s %6s %6s %6s %9s %9s %4s | %s\n' mode "runs (creates/s)" median p50 p99 \
    adm50 adm99 batch "wh w:c" "ctl w:c" err "CPU ms/create: apiserver etcd webhook controller"
med() { stat_median "$RESULTS" "$1" "$2"; }
sum() { stat_sum "$RESULTS" "$1" "$2"; }
for mode in "${modes[@]}"; do
    printf '%-4s %-22s %6.0f %6.1f %6.1f %6.1f %6.1f %6.1f %9s %9s %4d | %9.2f %5.2f %7.2f %10.2f\n' "$mode" \
        "$(stat_list "$RESULTS" "$mode" per_second)" "$(med "$mode" per_second)" \
        "$(med "$mode" p50_ms)" "$(med "$mode" p99_ms)" \
        "$(awk -v v="$(med "$mode" m.apiserver.admission_s.p50)" 'BEGIN {print v * 1000}')" \
        "$(awk -v v="$(med "$mode" m.apiserver.admission_s.p99)" 'BEGIN {print v * 1000}')" \
        "$(med "$mode" m.webhook.batch.mean)" \
        "$(sum "$mode" m.webhook.batches_ok):$(sum "$mode" m.webhook.conflicts)" \
        "$(sum "$mode" m.controller.writes):$(sum "$mode" m.controller.conflicts)" \
        "$(($(sum "$mode" refused) + $(sum "$mode" errors)))" \
        "$(med "$mode" cpu.apiserver_ms)" "$(med "$mode" cpu.etcd_ms)" \
        "$(med "$mode" cpu.webhook_ms)" "$(med "$mode" cpu.controller_ms)"
done
m() { stat_median "$RESULTS" "$1" per_second; }
has() { [[ " ${modes[*]} " == *" $1 "* ]]; }
if has a; then
    echo "a/b = $(ratio "$(m a)" "$(m b)")   a/c = $(ratio "$(m a)" "$(m c)")   b/c = $(ratio "$(m b)" "$(m c)")"
fi
if has a+; then
    echo "a+/b+ = $(ratio "$(m a+)" "$(m b+)")   a+/c+ = $(ratio "$(m a+)" "$(m c+)")   b+/c+ = $(ratio "$(m b+)" "$(m c+)")"
fi
if has as; then
    echo "as/bs = $(ratio "$(m as)" "$(m bs)")   as/cs = $(ratio "$(m as)" "$(m cs)")   bs/cs = $(ratio "$(m bs)" "$(m cs)")"
fi
echo "batch-size histogram (requests per batch: batches), summed over the runs of each mode:"
for mode in "${modes[@]}"; do
    [[ $mode == a* ]] || continue
    printf '  %-3s %s\n' "$mode" "$(jq -rs --arg p "$mode#" '[.[] | select(.label | startswith($p)) | .m.webhook.batch.buckets | to_entries[]]
        | group_by(.key) | map({k: .[0].key, v: (map(.value) | add)}) | sort_by(.k | ltrimstr("le") | tonumber? // 1e9)
        | map("\(.k)=\(.v)") | join(" ")' "$RESULTS")"
done
cat "$ENTRIES"
echo "raw results: $RESULTS"
