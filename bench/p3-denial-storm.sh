#!/usr/bin/env bash
# P3: does writing denial events cost decisions? A storm of refused AdmissionReviews
# (every one a distinct binding over the quota, so every one starts two event series:
# the worst case for the event writer) straight to two webhooks, one with --events=true
# and one with --events=false, 32 connections, modes alternated.
#
# Usage: bench/p3-denial-storm.sh [ROUNDS (default 3)]
# Environment: COUNT (5000 reviews per run), CONCURRENCY (32), BIN_DIR, BENCH_DIR.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
COUNT=${COUNT:-5000}
CONCURRENCY=${CONCURRENCY:-32}
RESULTS=$WORK/p3-results.jsonl
CPU=$WORK/p3-cpu.jsonl

require_binaries
trap bench_cleanup EXIT
bench_up
make_certs
: >"$RESULTS"
: >"$CPU"

new_namespace kq-p3
quota kq-p3 q '{requests.cpu: "1"}'
"$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace kq-p3 --quota q \
    --used requests.cpu=0

declare -A PORT ADMIN PID
for mode in on off; do
    start_webhook "webhook-events-$mode" "--events=$([[ $mode == on ]] && echo true || echo false)"
    PORT[$mode]=$WEBHOOK_PORT
    ADMIN[$mode]=$WEBHOOK_ADMIN
    PID[$mode]=$WEBHOOK_PID
done
HZ=$(getconf CLK_TCK)

for round in $(seq 1 "$ROUNDS"); do
    log "round $round"
    for mode in on off; do
        before=$(cpu_ticks "${PID[$mode]}")
        "$KQ_LOAD" reviews --url "https://127.0.0.1:${PORT[$mode]}" --ca "$TLS/ca.pem" \
            --namespace kq-p3 --count "$COUNT" --concurrency "$CONCURRENCY" --cpu 2 \
            --label "events-$mode#$round" >>"$RESULTS"
        after=$(cpu_ticks "${PID[$mode]}")
        # Webhook CPU per review (warm-up included in both modes alike), microseconds.
        awk -v b="$before" -v a="$after" -v n="$COUNT" -v hz="$HZ" -v l="events-$mode#$round" \
            'BEGIN {printf "{\"label\":\"%s\",\"cpu_us\":%.1f}\n", l, (a-b)*1e6/hz/n}' >>"$CPU"
    done
done
sleep 2

echo
echo "P3: refused reviews/s, events on vs off, $CONCURRENCY connections, $ROUNDS rounds (median)"
printf '%-10s %-26s %9s %7s %7s %8s %7s %12s\n' mode "runs (reviews/s)" median p50_ms p99_ms refused errors cpu_us/review
for mode in events-on events-off; do
    printf '%-10s %-26s %9.0f %7.2f %7.2f %8d %7d %12.1f\n' "$mode" \
        "$(stat_list "$RESULTS" "$mode" per_second)" "$(stat_median "$RESULTS" "$mode" per_second)" \
        "$(stat_median "$RESULTS" "$mode" p50_ms)" "$(stat_median "$RESULTS" "$mode" p99_ms)" \
        "$(stat_sum "$RESULTS" "$mode" refused)" "$(stat_sum "$RESULTS" "$mode" errors)" \
        "$(stat_median "$CPU" "$mode" cpu_us)"
done
m() { stat_median "$RESULTS" "$1" per_second; }
echo "events-on/events-off = $(ratio "$(m events-on)" "$(m events-off)")"
echo "event writer of the events-on webhook:"
curl -s "http://127.0.0.1:${ADMIN[on]}/metrics" | grep -E '^kq_webhook_events_' || true
echo "raw results: $RESULTS"
