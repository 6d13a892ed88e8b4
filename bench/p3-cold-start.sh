#!/usr/bin/env bash
# P3 cold start at scale, through the real apiserver, no webhook registered:
#
#   1. NAMESPACES (100) namespaces with a quota each, then N (100,000) ResourceBindings
#      created through the apiserver (kq-load, round-robin, no controller running)
#   2. LIST of all bindings twice: consistent pages of 500 from etcd, and one
#      resourceVersion=0 list from the apiserver's watch cache (what the controller's
#      watches ask for); transfer vs typed deserialize time of each
#   3. ROUNDS times: every quota's status.used reset (pods=0), a controller started cold;
#      seconds until /readyz answers 200, and until the FIRST COMPLETE STATUS: every
#      quota's status.used.pods is N / NAMESPACES; its RSS then
#   4. QUOTAS (10,000) more quotas over QUOTA_NAMESPACES (5,000) namespaces, each with a
#      synced status (kq-bench populate-quotas); then ROUNDS times a webhook started cold:
#      seconds until /readyz answers 200 (its quota cache listed and synced), its RSS, and
#      the time of its first two ResourceBinding reviews (sent straight to it); and
#      each round the two lists of every KarmadaQuota a cold webhook can wait for, timed
#      whole: consistent from etcd and resourceVersion=0 from the watch cache (what the
#      webhook lists, R13 of docs/reservations.md), in alternating order
#
# With BEFORE_BIN_DIR (another build's karmada-quota-webhook and -controller), every round
# starts both builds, in alternating order (odd rounds before → after, even rounds after →
# before), so their times are compared side by side on one control plane in one run.
#
# Usage: bench/p3-cold-start.sh
# Environment: N, NAMESPACES, CONCURRENCY (64), QUOTAS, QUOTA_NAMESPACES, ROUNDS (3),
# BIN_DIR (release binaries: karmada-quota-webhook, karmada-quota-controller, kq-load,
# kq-bench), BEFORE_BIN_DIR (optional), BENCH_DIR, and the binaries' KQ_* flag twins.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${N:-100000}
NAMESPACES=${NAMESPACES:-100}
CONCURRENCY=${CONCURRENCY:-64}
QUOTAS=${QUOTAS:-10000}
QUOTA_NAMESPACES=${QUOTA_NAMESPACES:-5000}
ROUNDS=${ROUNDS:-3}
HARD='{requests.cpu: "100k", pods: "1M", count/deployments.apps: "1M"}'
RESULTS=$WORK/p3-cold-start.jsonl
((N % NAMESPACES == 0)) || die "N must be a multiple of NAMESPACES"
PER_NS=$((N / NAMESPACES))

require_binaries
[[ -x $BIN/karmada-quota-controller ]] || die "$BIN/karmada-quota-controller missing"
trap bench_cleanup EXIT
bench_up
make_certs
: >"$RESULTS"

rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
peak_mib() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }

p3_namespaces "$NAMESPACES" "$HARD"

log "$N ResourceBinding creates over $NAMESPACES namespaces ($CONCURRENCY in flight)"
line=$("$KQ_LOAD" creates --kubeconfig "$KUBECONFIG" --namespace "$(IFS=,; echo "${nss[*]}")" \
    --count "$N" --concurrency "$CONCURRENCY" --label p3-cold)
jq -c '{phase: "creates"} + .' <<<"$line" | tee -a "$RESULTS"

log "LIST of all bindings: consistent pages from etcd, then one list from the watch cache"
"$KQ_BENCH" list-bindings --kubeconfig "$KUBECONFIG" | jq -c '{phase: "list"} + .' | tee -a "$RESULTS"
"$KQ_BENCH" list-bindings --kubeconfig "$KUBECONFIG" --any | jq -c '{phase: "list"} + .' | tee -a "$RESULTS"

# How many quotas do not show PER_NS pods yet (status.used.pods in the controller's
# canonical form: 1000 is written `1k`).
incomplete() {
    kubectl --kubeconfig "$KUBECONFIG" get kquota -A -o json 2>/dev/null |
        jq --argjson want "$PER_NS" 'def n: if endswith("k") then (.[:-1] | tonumber) * 1000
            elif endswith("M") then (.[:-1] | tonumber) * 1000000 else tonumber end;
            [.items[] | select(.metadata.namespace | startswith("p3-"))
             | select(((.status.used.pods // "0") | n) != $want)] | length'
}

# The builds of a round, in order: "label=dir" pairs.
builds() { # round
    if [[ -z ${BEFORE_BIN_DIR:-} ]]; then
        echo "after=$BIN"
    elif (($1 % 2)); then
        echo "before=$BEFORE_BIN_DIR after=$BIN"
    else
        echo "after=$BIN before=$BEFORE_BIN_DIR"
    fi
}

cold_controller() { # round label dir
    log "round $1 ($2): every quota's status.used reset; a cold controller on $N bindings"
    for ns in "${nss[@]}"; do
        "$KQ_LOAD" seed-used --kubeconfig "$KUBECONFIG" --namespace "$ns" --quota q --used pods=0 >/dev/null
    done
    [[ $(incomplete) == "$NAMESPACES" ]] || die "the reset left some quota complete"
    local admin t0 ready="" complete="" pid
    admin=$(free_port)
    t0=$(now)
    "$3/karmada-quota-controller" --kubeconfig "$KUBECONFIG" \
        --admin-listen "127.0.0.1:$admin" --no-leader-election \
        --log warn >"$LOGS/controller-cold-$1-$2.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    while [[ -z $complete ]]; do
        kill -0 "$pid" 2>/dev/null || die "the cold controller exited; see $LOGS/controller-cold-$1-$2.log"
        [[ -n $ready || $(http_code "$admin" /readyz) != 200 ]] || ready=$(since "$t0")
        if [[ $(incomplete) == 0 ]]; then complete=$(since "$t0"); fi
        awk -v t="$(since "$t0")" 'BEGIN {exit !(t > 900)}' && die "no complete status within 900 s"
        sleep 0.2
    done
    [[ -n $ready ]] || ready=$complete
    jq -cn --argjson r "$1" --arg build "$2" --argjson ready "$ready" --argjson complete "$complete" \
        --argjson rss "$(rss_mib "$pid")" --argjson peak "$(peak_mib "$pid")" --argjson n "$N" --argjson q "$NAMESPACES" \
        '{phase: "controller-cold", round: $r, build: $build, bindings: $n, quotas: $q, ready_s: $ready,
          first_complete_status_s: $complete, rss_mib: $rss, peak_rss_mib: $peak}' | tee -a "$RESULTS"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

for r in $(seq 1 "$ROUNDS"); do
    for b in $(builds "$r"); do cold_controller "$r" "${b%%=*}" "${b#*=}"; done
done

log "$QUOTAS quotas over $QUOTA_NAMESPACES namespaces, each with a synced status"
"$KQ_BENCH" populate-quotas --kubeconfig "$KUBECONFIG" --quotas "$QUOTAS" \
    --namespaces "$QUOTA_NAMESPACES" --concurrency 32 | jq -c '{phase: "populate"} + .' | tee -a "$RESULTS"

# Seconds for one ResourceBinding CREATE review (1 × 100m in ${nss[0]}, whose quota has
# room) sent straight to the webhook; dies unless it is allowed. The first review after
# ready is the first decision against that quota (with batches: its read from etcd).
review_s() { # port name
    local out
    out=$(jq -cn --arg ns "${nss[0]}" --arg name "rb-$2" '{apiVersion: "admission.k8s.io/v1", kind: "AdmissionReview",
        request: {uid: ("review-" + $name), kind: {group: "work.karmada.io", version: "v1alpha2", kind: "ResourceBinding"},
          resource: {group: "work.karmada.io", version: "v1alpha2", resource: "resourcebindings"},
          name: $name, namespace: $ns, operation: "CREATE", dryRun: false,
          userInfo: {username: "system:serviceaccount:karmada-system:karmada-controller-manager"},
          object: {apiVersion: "work.karmada.io/v1alpha2", kind: "ResourceBinding",
            metadata: {name: $name, namespace: $ns, uid: ("uid-" + $name), generation: 1},
            spec: {resource: {apiVersion: "apps/v1", kind: "Deployment", name: $name, namespace: $ns},
              replicas: 1, replicaRequirements: {resourceRequest: {cpu: "100m"}}}}}}' |
        curl -sS --cacert "$TLS/ca.pem" -H 'Content-Type: application/json' --data-binary @- \
            -w '\n%{time_total}' "https://127.0.0.1:$1/validate/resourcebinding")
    jq -e '.response.allowed == true' <<<"$(head -n -1 <<<"$out")" >/dev/null ||
        die "review $2 not allowed: $out"
    tail -n 1 <<<"$out"
}

cold_webhook() { # round label dir
    log "round $1 ($2): a cold webhook on $((QUOTAS + NAMESPACES)) quotas"
    local port admin t0 pid ready
    port=$(free_port)
    admin=$(free_port)
    t0=$(now)
    "$3/karmada-quota-webhook" --listen "127.0.0.1:$port" --admin-listen "127.0.0.1:$admin" \
        --kubeconfig "$KUBECONFIG" --tls-cert-file "$TLS/tls.pem" \
        --tls-private-key-file "$TLS/tls.key" --log warn >"$LOGS/webhook-cold-$1-$2.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    until [[ $(http_code "$admin" /readyz) == 200 ]]; do
        kill -0 "$pid" 2>/dev/null || die "the cold webhook exited; see $LOGS/webhook-cold-$1-$2.log"
        awk -v t="$(since "$t0")" 'BEGIN {exit !(t > 300)}' && die "the webhook was not ready within 300 s"
        sleep 0.05
    done
    ready=$(since "$t0")
    local first second
    first=$(review_s "$port" "$1-$2-first")
    second=$(review_s "$port" "$1-$2-second")
    jq -cn --argjson r "$1" --arg build "$2" --argjson ready "$ready" --argjson rss "$(rss_mib "$pid")" \
        --argjson peak "$(peak_mib "$pid")" --argjson first "$first" --argjson second "$second" \
        --argjson q "$((QUOTAS + NAMESPACES))" \
        '{phase: "webhook-cold", round: $r, build: $build, quotas: $q, ready_s: $ready, rss_mib: $rss, peak_rss_mib: $peak,
          first_review_s: $first, second_review_s: $second}' | tee -a "$RESULTS"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

# Seconds for one whole list of every KarmadaQuota (kubectl's own start included).
list_s() { # query
    local t0
    t0=$(now)
    kubectl --kubeconfig "$KUBECONFIG" get --raw "/apis/quota.karmada.io/v1alpha1/karmadaquotas$1" >/dev/null
    since "$t0"
}
quota_lists() { # round
    local consistent cache
    if (($1 % 2)); then
        consistent=$(list_s "")
        cache=$(list_s "?resourceVersion=0")
    else
        cache=$(list_s "?resourceVersion=0")
        consistent=$(list_s "")
    fi
    jq -cn --argjson r "$1" --argjson q "$((QUOTAS + NAMESPACES))" --argjson c "$consistent" --argjson w "$cache" \
        '{phase: "quota-list", round: $r, quotas: $q, consistent_s: $c, watch_cache_s: $w}' | tee -a "$RESULTS"
}

# The webhooks reserve in batches there (the flag's default unless KQ_RESERVATION_NAMESPACE).
kubectl --kubeconfig "$KUBECONFIG" create namespace "${KQ_RESERVATION_NAMESPACE:-karmada-quota-system}" \
    >/dev/null 2>&1 || true
for r in $(seq 1 "$ROUNDS"); do
    quota_lists "$r"
    for b in $(builds "$r"); do cold_webhook "$r" "${b%%=*}" "${b#*=}"; done
done
log "results: $RESULTS"
