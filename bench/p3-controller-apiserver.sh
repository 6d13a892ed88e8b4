#!/usr/bin/env bash
# P3 through the real apiserver: the controller with N (100,000) bindings over
# NAMESPACES (100) namespaces, one quota each, no webhook registered.
#
#   1. the controller starts on an empty control plane; its RSS is read
#   2. N creates (kq-load, round-robin over the namespaces): the controller folds them as
#      they come (events/s = the apiserver's create rate); its CPU per event, its status
#      writes per quota and its RSS per binding after are read
#   3. LIST of all bindings (kq-bench list-bindings): transfer vs typed deserialize time
#   4. a second controller starts cold on the N bindings: time until every quota's
#      status.used.pods is N / NAMESPACES (the full list, index and recompute)
#
# Usage: bench/p3-controller-apiserver.sh
# Environment: N (100000), NAMESPACES (100), CONCURRENCY (64), BIN_DIR, BENCH_DIR, and the
# controller's KQ_* flag twins.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-100000}
NAMESPACES=${NAMESPACES:-100}
CONCURRENCY=${CONCURRENCY:-64}
HARD='{requests.cpu: "100k", pods: "1M", count/deployments.apps: "1M"}'
RESULTS=$WORK/p3-apiserver.json
((N % NAMESPACES == 0)) || die "N must be a multiple of NAMESPACES"
PER_NS=$((N / NAMESPACES))

require_binaries
[[ -x $BIN/karmada-quota-controller ]] || die "$BIN/karmada-quota-controller missing"
trap bench_cleanup EXIT
bench_up

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
ticks() { cpu_ticks "$1"; }
hz=$(getconf CLK_TCK)
p3_namespaces "$NAMESPACES" "$HARD"

start_controller controller-warm
for ns in "${nss[@]}"; do wait_used "$ns" q; done
rss0=$(rss_kib "$CONTROLLER_PID")
scrape_all "$WORK/metrics/p3-before"
cpu0=$(ticks "$CONTROLLER_PID")
log "controller RSS with an empty index: $rss0 KiB; $N creates"
line=$("$KQ_LOAD" creates --kubeconfig "$KUBECONFIG" --namespace "$(IFS=,; echo "${nss[*]}")" \
    --count "$N" --concurrency "$CONCURRENCY" --label p3)
# Folded: every quota shows its bindings.
all_used() {
    kubectl --kubeconfig "$KUBECONFIG" get kquota -A -o json |
        jq --argjson want "$PER_NS" 'def n: if endswith("k") then (.[:-1] | tonumber) * 1000
            elif endswith("M") then (.[:-1] | tonumber) * 1000000 else tonumber end;
            [.items[] | select(((.status.used.pods // "0") | n) != $want)] | length'
}
t=$SECONDS
until [[ $(all_used) == 0 ]]; do
    ((SECONDS - t < 120)) || die "the controller did not fold every binding within 120 s"
    sleep 0.5
done
cpu1=$(ticks "$CONTROLLER_PID")
scrape_all "$WORK/metrics/p3-after"
rss1=$(rss_kib "$CONTROLLER_PID")
m=$("$KQ_BENCH" metrics-delta --before "$WORK/metrics/p3-before/controller.prom" \
    --after "$WORK/metrics/p3-after/controller.prom" \
    --counter writes=kq_controller_status_writes_total --counter conflicts=kq_controller_status_conflicts_total \
    --counter reconciles=kq_controller_reconciles_total)
log "LIST of all bindings"
list=$("$KQ_BENCH" list-bindings --kubeconfig "$KUBECONFIG")

jq -n --argjson line "$line" --argjson m "$m" --argjson list "$list" --argjson n "$N" \
    --argjson rss0 "$rss0" --argjson rss1 "$rss1" '{bindings: $n, creates_per_s: $line.per_second,
        controller: $m, rss_bytes_per_binding: (($rss1 - $rss0) * 1024 / $n), list: $list}' \
    >"$RESULTS.partial"
log "a cold controller on $N bindings"
kill "$CONTROLLER_PID"
wait "$CONTROLLER_PID" 2>/dev/null || true
t0=$(date +%s.%N)
# Not start_controller: its readiness wait (30 s) is shorter than listing N bindings.
CONTROLLER_ADMIN=$(free_port)
"$BIN/karmada-quota-controller" --kubeconfig "$KUBECONFIG" \
    --admin-listen "127.0.0.1:$CONTROLLER_ADMIN" --no-leader-election \
    --log warn >"$LOGS/controller-cold.log" 2>&1 &
CONTROLLER_PID=$!
PIDS+=("$CONTROLLER_PID")
# status.used is already right, so a cold start writes nothing: it is synced once its
# index holds every binding and every quota was reconciled (its own metrics).
t=$SECONDS
until [[ $(curl -s "http://127.0.0.1:$CONTROLLER_ADMIN/metrics" |
    awk '/^kq_controller_reconciles_total/ {s += $2} END {print s + 0}') -ge $NAMESPACES ]] &&
    [[ $(curl -s "http://127.0.0.1:$CONTROLLER_ADMIN/metrics" |
        awk '/^kq_controller_bindings / {print $2}') == "$N" ]]; do
    ((SECONDS - t < 600)) || die "the cold controller did not sync within 600 s"
    kill -0 "$CONTROLLER_PID" 2>/dev/null || die "the cold controller exited; see $LOGS/controller-cold.log"
    sleep 0.2
done
t1=$(date +%s.%N)
rss_cold=$(rss_kib "$CONTROLLER_PID")

jq -n --argjson line "$line" --argjson m "$m" --argjson list "$list" \
    --argjson n "$N" --argjson rss0 "$rss0" --argjson rss1 "$rss1" --argjson rss_cold "$rss_cold" \
    --argjson cpu_ms "$(( (cpu1 - cpu0) * 1000 / hz ))" \
    --argjson cold_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" '{
        bindings: $n, creates_per_s: $line.per_second, create_errors: ($line.errors + $line.refused),
        controller_cpu_ms_per_event: ($cpu_ms / $n), controller: $m,
        rss_empty_mib: ($rss0 / 1024), rss_after_mib: ($rss1 / 1024),
        rss_bytes_per_binding: (($rss1 - $rss0) * 1024 / $n),
        list: $list, cold_start_s: $cold_s, rss_cold_mib: ($rss_cold / 1024)
    }' | tee "$RESULTS"
