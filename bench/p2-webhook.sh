#!/usr/bin/env bash
# P2: AdmissionReview requests per second straight to the webhook (no
# apiserver in the path) vs a bare HTTPS endpoint on the same stack (`kq-load
# bare-server`: axum + axum-server, rustls with ring, answers "allowed" after reading the
# review's uid), 32 connections, modes alternated:
#
#   bare         the bare endpoint
#   passthrough  the webhook, bindings of a namespace without a quota
#   quota        the webhook, a namespace with a quota that admits all, dryRun=true: the
#                whole decision (cache lookup, charge, core decide) without a status write
#   quota-write  the webhook, a namespace with a quota, dryRun=false: each decision is
#                made durable in a reservation batch (one create per decision, shared by
#                the reviews decided together) and confirmed in the webhook's watch —
#                fewer reviews per run (WRITES), a fresh namespace each round, since
#                without a controller no batch is folded and every entry stays
#
# Usage: bench/p2-webhook.sh [ROUNDS (default 3)]
# Environment: COUNT (50000 reviews per run), WRITES (1000), CONCURRENCY (32), BIN_DIR,
# BENCH_DIR. The load generator shares the machine's cores with the server it measures.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
COUNT=${COUNT:-50000}
WRITES=${WRITES:-1000}
CONCURRENCY=${CONCURRENCY:-32}
RESULTS=$WORK/p2-results.jsonl
HARD='{requests.cpu: "100k", pods: "100k"}'

require_binaries
trap bench_cleanup EXIT
bench_up
make_certs
: >"$RESULTS"

start_webhook webhook --max-reservations 5000
BARE_PORT=$(free_port)
"$KQ_LOAD" bare-server --listen "127.0.0.1:$BARE_PORT" --tls-cert-file "$TLS/tls.pem" \
    --tls-private-key-file "$TLS/tls.key" --max-seconds 1800 >"$LOGS/bare.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$BARE_PORT") 2>/dev/null && break
    sleep 0.1
done
log "bare server: https://127.0.0.1:$BARE_PORT"

# The webhook is not registered with the apiserver: the reviews come from kq-load only.
new_namespace kq-p2-noquota
new_namespace kq-p2-quota
quota kq-p2-quota q "$HARD"
"$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace kq-p2-quota --quota q \
    --used requests.cpu=0,pods=0

reviews() { # label url namespace count [--dry-run]
    local label=$1 url=$2 ns=$3 count=$4
    shift 4
    "$KQ_LOAD" reviews --url "$url" --ca "$TLS/ca.pem" --namespace "$ns" --count "$count" \
        --concurrency "$CONCURRENCY" --label "$label" "$@" >>"$RESULTS"
}

# Until the webhook's cache has the seeded status: a dry-run review is allowed.
for _ in $(seq 1 100); do
    "$KQ_LOAD" reviews --url "https://127.0.0.1:$WEBHOOK_PORT" --ca "$TLS/ca.pem" \
        --namespace kq-p2-quota --count 1 --warmup 0 --dry-run 2>/dev/null |
        jq -e '.ok == 1' >/dev/null && break
    sleep 0.1
done

WH=https://127.0.0.1:$WEBHOOK_PORT
for round in $(seq 1 "$ROUNDS"); do
    log "round $round"
    reviews "bare#$round" "https://127.0.0.1:$BARE_PORT" kq-p2-noquota "$COUNT" --dry-run
    reviews "passthrough#$round" "$WH" kq-p2-noquota "$COUNT" --dry-run
    reviews "quota#$round" "$WH" kq-p2-quota "$COUNT" --dry-run
    ns=kq-p2-write-$round
    new_namespace "$ns"
    quota "$ns" q "$HARD"
    "$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace "$ns" --quota q \
        --used requests.cpu=0,pods=0
    "$KQ_LOAD" wait-quota --kubeconfig "$KUBECONFIG" --namespace "$ns"
    reviews "quota-write#$round" "$WH" "$ns" "$WRITES" --warmup 100
done

echo
echo "P2: AdmissionReviews/s straight to the endpoint, $CONCURRENCY connections, $ROUNDS rounds (median)"
printf '%-12s %-26s %9s %7s %7s %8s %7s\n' mode "runs (reviews/s)" median p50_ms p99_ms refused errors
for mode in bare passthrough quota quota-write; do
    printf '%-12s %-26s %9.0f %7.2f %7.2f %8d %7d\n' "$mode" \
        "$(stat_list "$RESULTS" "$mode" per_second)" "$(stat_median "$RESULTS" "$mode" per_second)" \
        "$(stat_median "$RESULTS" "$mode" p50_ms)" "$(stat_median "$RESULTS" "$mode" p99_ms)" \
        "$(stat_sum "$RESULTS" "$mode" refused)" "$(stat_sum "$RESULTS" "$mode" errors)"
done
m() { stat_median "$RESULTS" "$1" per_second; }
echo "passthrough/bare = $(ratio "$(m passthrough)" "$(m bare)")   quota(dry-run)/bare = $(ratio "$(m quota)" "$(m bare)")   quota-write/bare = $(ratio "$(m quota-write)" "$(m bare)")"
echo "raw results: $RESULTS"
