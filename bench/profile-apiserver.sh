#!/usr/bin/env bash
# Where the apiserver's CPU goes during P1: runs the P1 workload against an
# apiserver started with --profiling=true, takes a CPU profile from /debug/pprof/profile
# while the creates run, and summarises it with `go tool pprof` (Go 1.15, installed by
# controlplane.sh install to build the apiserver).
#
#   MODE=quota        creates into a namespace with a quota, the controller running (P1 a+)
#   MODE=passthrough  a namespace without a quota (b+)
#   MODE=none         no webhook registered (c+)
#
# Usage: bench/profile-apiserver.sh
# Environment: MODE (quota), COUNT (12000: enough creates to outlast the profile),
# CONCURRENCY (32), SECONDS_PROFILED (15), WARMUP (2 s before the profile starts),
# BIN_DIR, BENCH_DIR, and the controller's KQ_* flag twins.
# Output: $BENCH_DIR/profile/apiserver-$MODE.pb.gz (the profile) and
# $BENCH_DIR/profile/apiserver-$MODE.txt (the summary: a table of where the time goes by
# request path, then pprof's -top by flat and by cumulative time).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODE=${MODE:-quota}
COUNT=${COUNT:-12000}
CONCURRENCY=${CONCURRENCY:-32}
SECONDS_PROFILED=${SECONDS_PROFILED:-15}
WARMUP=${WARMUP:-2}
OUT=$WORK/profile
HARD='{requests.cpu: "100k", pods: "100k"}'
case $MODE in quota | passthrough | none) ;; *) die "MODE must be quota, passthrough or none" ;; esac

go_bin() {
    local go
    go=$(dpkg -L golang-1.15-go 2>/dev/null | grep -E '/bin/go$' | head -n1) || true
    [[ -n $go && -x $go ]] || die "no Go 1.15 (golang-1.15-go): run e2e/controlplane/controlplane.sh install"
    echo "$go"
}
GO=$(go_bin)
APISERVER=$("$REPO/e2e/controlplane/controlplane.sh" path)

require_binaries
[[ -x $BIN/karmada-quota-controller ]] || die "$BIN/karmada-quota-controller missing: cargo build --release --bins"
trap bench_cleanup EXIT
export APISERVER_EXTRA_ARGS="--profiling=true"
bench_up
make_certs
mkdir -p "$OUT"

start_webhook webhook --max-reservations 5000
register_webhook "$WEBHOOK_PORT"
start_controller controller
ns=kq-profile-$MODE
new_namespace "$ns"
"$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "$ns" --admin "127.0.0.1:$WEBHOOK_ADMIN"
case $MODE in
quota)
    quota "$ns" q "$HARD"
    wait_used "$ns" q
    "$KQ_LOAD" wait-quota --kubeconfig "$KUBECONFIG" --namespace "$ns"
    ;;
none)
    unregister_webhook
    "$KQ_LOAD" wait-webhook --kubeconfig "$KUBECONFIG" --namespace "$ns" \
        --admin "127.0.0.1:$WEBHOOK_ADMIN" --not-called
    ;;
esac

token=$(sed -n 's/^TOKEN=//p' "$CP/env")
port=$(sed -n 's/^APISERVER_0_PORT=//p' "$CP/env")
log "$COUNT creates into $ns ($MODE); profiling the apiserver for ${SECONDS_PROFILED}s after ${WARMUP}s"
"$KQ_LOAD" creates --kubeconfig "$KUBECONFIG" --namespace "$ns" --count "$COUNT" \
    --concurrency "$CONCURRENCY" --label "profile-$MODE" >"$OUT/creates-$MODE.json" &
load=$!
PIDS+=("$load")
sleep "$WARMUP"
curl -sfk --max-time $((SECONDS_PROFILED + 30)) -H "Authorization: Bearer $token" \
    -o "$OUT/apiserver-$MODE.pb.gz" \
    "https://127.0.0.1:$port/debug/pprof/profile?seconds=$SECONDS_PROFILED" ||
    die "could not take the profile from /debug/pprof/profile"
if kill -0 "$load" 2>/dev/null; then
    log "profile taken; waiting for the creates to finish"
else
    log "warning: the creates finished before the profile did (raise COUNT): the profile includes idle time"
fi
wait "$load" || die "kq-load creates failed"
# Every create fits (or no webhook is called): a refusal or an error means the profile is
# of something else.
jq -e --argjson n "$COUNT" '.ok == $n' "$OUT/creates-$MODE.json" >/dev/null ||
    die "not every create was admitted: $(jq -c '{ok, refused, errors, samples: .samples[:2]}' "$OUT/creates-$MODE.json")"

pprof() { "$GO" tool pprof "$@" "$APISERVER" "$OUT/apiserver-$MODE.pb.gz" 2>/dev/null; }
# share REGEX [FRAME]: the share of all samples whose stack contains a frame matching
# REGEX; with FRAME, of those the share under the first function matching FRAME.
share() {
    if [[ -z ${2:-} ]]; then
        pprof -top -nodecount=1000000 -focus="$1" |
            sed -n 's/.*Showing nodes accounting for [^,]*, \([0-9.]*%\) of .*/\1/p' | head -n1
    else
        pprof -top -cum -nodecount=1000000 -focus="$1" | grep -E -m1 "$2" | awk '{print $5}'
    fi
}
total=$(pprof -top -nodecount=1 | sed -n 's/.*of \([^ ]*\) total.*/\1/p' | head -n1)
{
    echo "kube-apiserver CPU profile, P1 mode $MODE: $SECONDS_PROFILED s during $COUNT creates," \
        "$CONCURRENCY concurrent; $total of samples"
    jq -r '"creates: \(.per_second | floor)/s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, errors \(.errors), refused \(.refused)"' \
        "$OUT/creates-$MODE.json"
    echo
    echo "share of apiserver CPU by what the stack contains (paths overlap: a create's webhook call is inside the create)"
    printf '%-58s %s\n' "frame (regex)" share
    # "focus regex@frame regex (optional)@label"
    for f in \
        'handlers.UpdateResource@@KarmadaQuota status PUT (the controller'"'"'s writes)' \
        'handlers.UpdateResource@schemaSliceValidator@  of which: schema validation of lists (reservations)' \
        'handlers.UpdateResource@customresource.statusStrategy.ValidateUpdate@  of which: validation, all of it' \
        'handlers.UpdateResource@etcd3.decode@  of which: decoding the stored object' \
        'handlers.UpdateResource@UpdatedObject@  of which: decode request + field manager' \
        'handlers.createHandler@@creates (POST: bindings and reservation batches)' \
        'handlers.createHandler@validatingDispatcher@  of which: the admission webhook call' \
        'handlers.DeleteResource@@reservation batch deletes (the controller'"'"'s sweep)' \
        'handlers.GetResource@@GET (re-reads after a 409)' \
        'serveWatch|WatchServer@@watch fan-out (encoding events to watchers)' \
        'fieldmanager@@managedFields (field manager), all requests' \
        'crypto/tls@@TLS' \
        'runtime.gcBgMarkWorker@@Go GC (background mark)'; do
        IFS=@ read -r focus frame label <<<"$f"
        printf '%-62s %s\n' "$label" "$(share "$focus" "$frame")"
    done
    echo
    echo "---- go tool pprof -top (flat) ----"
    pprof -top -nodecount=40
    echo
    echo "---- go tool pprof -top -cum ----"
    pprof -top -cum -nodecount=60
} >"$OUT/apiserver-$MODE.txt"
sed -n '1,20p' "$OUT/apiserver-$MODE.txt"
echo "profile: $OUT/apiserver-$MODE.pb.gz; summary: $OUT/apiserver-$MODE.txt"
