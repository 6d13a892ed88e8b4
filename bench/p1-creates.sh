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
#
# Usage: bench/p1-creates.sh [ROUNDS (default 3)]
# Environment: COUNT (2000), CONCURRENCY (32), BIN_DIR (target/release), BENCH_DIR
# (target/bench), SERIES ("plain controller", or one of them).
# Needs: cargo build --release --bins; the apiserver installed (controlplane.sh install).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
COUNT=${COUNT:-2000}
CONCURRENCY=${CONCURRENCY:-32}
SERIES=${SERIES:-plain controller}
RESULTS=$WORK/p1-results.jsonl
ENTRIES=$WORK/p1-entries.txt
HARD='{requests.cpu: "100k", pods: "100k"}'

require_binaries
trap bench_cleanup EXIT
bench_up
make_certs
: >"$RESULTS"
: >"$ENTRIES"

# The bench's webhook may hold every entry of a run without a controller (2000 per
# namespace; the default cap, 1000, would refuse half of mode a).
start_webhook webhook --max-reservations 5000
register_webhook "$WEBHOOK_PORT"
new_namespace kq-p1-probe
"$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace kq-p1-probe \
    --admin "127.0.0.1:$WEBHOOK_ADMIN"

entries() { kubectl --kubeconfig "$KUBECONFIG" get kquota q -n "$1" -o json 2>/dev/null |
    jq '.status.reservations // [] | length'; }
# Entries whose binding does not exist (admitted by the webhook, then not stored: a
# refusal after the write, e.g. a decision timeout; they lapse after the TTL).
orphans() {
    comm -13 <(kubectl --kubeconfig "$KUBECONFIG" get resourcebindings -n "$1" -o json 2>/dev/null |
        jq -r '.items[].metadata.uid' | sort) \
        <(kubectl --kubeconfig "$KUBECONFIG" get kquota q -n "$1" -o json 2>/dev/null |
            jq -r '.status.reservations // [] | .[].reservedBy.uid' | sort) | wc -l
}

# run MODE ROUND: one run of COUNT creates into a fresh namespace.
run() {
    local mode=$1 round=$2 ns
    ns=kq-p1-${mode/+/-ctl}-$round
    new_namespace "$ns"
    case $mode in
    a)
        quota "$ns" q "$HARD"
        "$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace "$ns" --quota q \
            --used requests.cpu=0,pods=0
        ;;
    a+)
        quota "$ns" q "$HARD"
        wait_used "$ns" q
        ;;
    c)
        unregister_webhook
        "$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "$ns" \
            --admin "127.0.0.1:$WEBHOOK_ADMIN" --not-called
        ;;
    esac
    if [[ $mode == a* ]]; then
        "$KQ_LOAD" wait-quota --kubeconfig "$KUBECONFIG" --namespace "$ns"
    fi
    log "run $mode round $round: $COUNT creates into $ns"
    local before line
    before=$(cpu_snapshot)
    line=$("$KQ_LOAD" creates --kubeconfig "$KUBECONFIG" --namespace "$ns" --count "$COUNT" \
        --concurrency "$CONCURRENCY" --label "$mode#$round")
    # The run's line plus the CPU each component spent per create during it.
    jq -c --argjson cpu "$(cpu_json "$before" "$(cpu_snapshot)" "$COUNT")" '. + {cpu: $cpu}' \
        <<<"$line" >>"$RESULTS"
    if [[ $mode == a* ]]; then
        echo "$mode round $round: $(entries "$ns") reservation entries in $ns/q right after the run," \
            "$(orphans "$ns") of them for no stored binding" >>"$ENTRIES"
    fi
    if [[ $mode == c ]]; then
        register_webhook "$WEBHOOK_PORT"
        "$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "$ns" \
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
if [[ " $SERIES " == *" controller "* ]]; then
    if [[ -x $BIN/karmada-quota-controller ]]; then
        start_controller controller
        series a+ b+
        modes+=(a+ b+)
    else
        log "no $BIN/karmada-quota-controller: the controller series is skipped"
    fi
fi

echo
echo "P1: ResourceBinding creates/s, $COUNT per run, $CONCURRENCY concurrent, $ROUNDS rounds (median)"
printf '%-4s %-20s %7s %7s %7s %6s | %s\n' mode "runs (creates/s)" median p99_ms refused errors \
    "CPU ms per create: apiserver etcd webhook controller"
for mode in "${modes[@]}"; do
    printf '%-4s %-20s %7.0f %7.1f %7d %6d | %9.2f %5.2f %7.2f %10.2f\n' "$mode" \
        "$(stat_list "$RESULTS" "$mode" per_second)" \
        "$(stat_median "$RESULTS" "$mode" per_second)" "$(stat_median "$RESULTS" "$mode" p99_ms)" \
        "$(stat_sum "$RESULTS" "$mode" refused)" "$(stat_sum "$RESULTS" "$mode" errors)" \
        "$(stat_median "$RESULTS" "$mode" cpu.apiserver_ms)" "$(stat_median "$RESULTS" "$mode" cpu.etcd_ms)" \
        "$(stat_median "$RESULTS" "$mode" cpu.webhook_ms)" "$(stat_median "$RESULTS" "$mode" cpu.controller_ms)"
done
m() { stat_median "$RESULTS" "$1" per_second; }
if [[ " ${modes[*]} " == *" a "* ]]; then
    echo "a/b = $(ratio "$(m a)" "$(m b)")   a/c = $(ratio "$(m a)" "$(m c)")   b/c = $(ratio "$(m b)" "$(m c)")"
fi
if [[ " ${modes[*]} " == *" a+ "* ]]; then
    echo "a+/b+ = $(ratio "$(m a+)" "$(m b+)")"
    [[ " ${modes[*]} " == *" c "* ]] && echo "a+/c = $(ratio "$(m a+)" "$(m c)")"
fi
cat "$ENTRIES"
echo "raw results: $RESULTS"
