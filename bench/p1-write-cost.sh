#!/usr/bin/env bash
# P1's cost model, measured: what one status write costs the apiserver against
# what one ResourceBinding create costs it. With k admissions per status write the P1
# ratio is about 1 / (1 + w / (k·c)); this measures c and w(N) on this stack.
#
# One control plane (etcd + kube-apiserver 1.20.2 with the project's CRDs), NO webhook
# registered: only the apiserver's own cost is measured. `kq-bench write-cost` runs, in
# rounds (cells alternated, even rounds in reverse order), OPS operations per cell from
# CONCURRENCY workers (each in its own namespace, no conflicts):
#
#   create        ResourceBinding creates of kq-load's shape                        c
#   put:N         KarmadaQuota status PUTs (resourceVersion set), N entries         w(N)
#   put-free:N    the same bodies to a throwaway copy of the CRD whose status is
#                 x-kubernetes-preserve-unknown-fields (schema left out)            u(N)
#   jsonpatch:N   JSON patch of the status: test resourceVersion, drop the oldest
#                 entry, append one                                                 p(N)
#   batch:k       a reservation batch object (schema-less, no subresource) holding k
#                 entries created under the next number of the worker's sequence, and
#                 the previous batch deleted: a reservation store outside the quota's
#                 status, whose write carries only its own admissions (batches)     b(k)
#   slot:k        the worker's one object of the batch kind rewritten in place with k
#                 new entries (PUT with its resourceVersion): what a fixed ring of
#                 ledger objects would write per admission instead                  s(k)
#   review        ResourceBinding creates like `create`, in namespaces where a
#                 validating webhook (kq-load bare-server: answers "allowed") reviews
#                 every CREATE; r − c is one review's hop, what an admission webhook
#                 adds per binding it reviews (REVIEW=1)                             r
#
# and charges each cell the apiserver's and etcd's CPU time (/proc/<pid>/stat) per
# operation, less their idle rate measured in the second before the cell. A create cell
# comes before every N's group of writes and after the last: each N's c is the mean of the
# two around it. Entries are the
# webhook's (core's decision, the compact form). Quotas are watched twice (webhook,
# controller), bindings once (controller), as in P1.
#
# Usage: bench/p1-write-cost.sh [ROUNDS (default 3)]
# Environment: OPS (300), CONCURRENCY (4), ENTRIES ("0,1,10,100,500"), BATCH (14: the k
# of the one-namespace bound), BATCHES ("1,14,32": the k of the batch cells; "" for none),
# SLOTS ("": the k of the slot cells, e.g. "1"), REVIEW ("": 1 adds the review cell), BIN_DIR
# (target/release), BENCH_DIR (target/bench).
# Needs: cargo build --release -p karmada-quota-bench (and -p karmada-quota-e2e for
# kq-load with REVIEW=1); controlplane.sh install.
# Output: a table per round on stdout; raw JSON in $BENCH_DIR/write-cost.json.
# RENDER_ONLY=1 prints the tables again from that JSON (no control plane, no run).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
OPS=${OPS:-300}
CONCURRENCY=${CONCURRENCY:-4}
ENTRIES=${ENTRIES:-0,1,10,100,500}
BATCH=${BATCH:-14}
BATCHES=${BATCHES-1,14,32}
SLOTS=${SLOTS-}
REVIEW=${REVIEW-}
OUT=$WORK/write-cost.json

[[ -n ${RENDER_ONLY:-} || -x $KQ_BENCH ]] || die "$KQ_BENCH missing: cargo build --release -p karmada-quota-bench"
command -v jq >/dev/null || die "jq missing (controlplane.sh install brings it)"
if [[ -z ${RENDER_ONLY:-} ]]; then
    trap bench_cleanup EXIT
    bench_up

    api=$(cp_pid apiserver-0)
    etcd=$(cp_pid etcd)
    [[ $(cat "/proc/$api/comm" 2>/dev/null) == kube-apiserver* ]] || die "pid $api is not the apiserver"
    review=()
    if [[ -n $REVIEW ]]; then
        [[ -x $KQ_LOAD ]] || die "$KQ_LOAD missing: cargo build --release -p karmada-quota-e2e"
        make_certs
        port=$(free_port)
        # bench_cleanup stops it; it would exit by itself after an hour.
        "$KQ_LOAD" bare-server --listen "127.0.0.1:$port" --tls-cert-file "$TLS/tls.pem" \
            --tls-private-key-file "$TLS/tls.key" --max-seconds 3600 >"$LOGS/review.log" 2>&1 &
        PIDS+=("$!")
        review=(--review-url "https://127.0.0.1:$port/" --review-ca-bundle "$(base64 -w0 <"$TLS/ca.pem")")
        log "review cells: the bare endpoint on https://127.0.0.1:$port"
    fi
    log "write-cost: $ROUNDS rounds, $OPS ops per cell, $CONCURRENCY workers, N in $ENTRIES (apiserver pid $api, etcd $etcd)"
    "$KQ_BENCH" write-cost --kubeconfig "$KUBECONFIG" --apiserver-pid "$api" --etcd-pid "$etcd" \
        --rounds "$ROUNDS" --ops "$OPS" --concurrency "$CONCURRENCY" --entries "$ENTRIES" --batch-sizes "$BATCHES" --slot-sizes "$SLOTS" \
        "${review[@]}" >"$OUT"
fi

# From the cells: each cell's CPU per op net of its round's median idle rate (one idle
# second before a cell is noisy: the apiserver's own periodic work comes in bursts); c for
# N = the mean of the two create cells around N's group; per N the ratios to c and the
# bounds 1 / (1 + w / (k·c)). Then the model w(N) ≈ w0 + e·N (least squares over the N
# measured; u, p alike) and its bounds: in one namespace a batch of k writes at least its
# own k entries, so its best case is N = k (nothing else pending), and k → ∞ leaves
# 1 / (1 + e/c).
jq -r --argjson k "$BATCH" '
  def f: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
  def med: sort | if length == 0 then 0 else .[length / 2 | floor] end;
  def b($c; $w; $k): if $c > 0 then 1 / (1 + $w / ($k * $c)) else null end;
  def fit($pts): ($pts | length) as $m | ($pts | map(.[0]) | add / $m) as $mx
    | ($pts | map(.[1]) | add / $m) as $my
    | ([$pts[] | (.[0] - $mx) * (.[0] - $mx)] | add) as $sxx
    | (if $sxx > 0 then ([$pts[] | (.[0] - $mx) * (.[1] - $my)] | add) / $sxx else 0 end) as $e
    | {w0: ($my - $e * $mx), e: $e};
  . as $all
  | [.cells[].round] | unique | map(. as $round
    | [$all.cells[] | select(.round == $round)] as $cells
    | ($cells | map(.idle_apiserver_ms_per_s) | med) as $ia
    | ($cells | map(.idle_etcd_ms_per_s) | med) as $ie
    | ($cells | map(. + {net: ([.apiserver_ms - $ia * .wall_s / .ops, 0] | max),
                         enet: ([.etcd_ms - $ie * .wall_s / .ops, 0] | max)})) as $cells
    | def cell($name): first($cells[] | select(.cell == $name)) // null;
      def net($name): cell($name) | if . == null then null else .net end;
      ([$cells[] | select(.kind == "create") | .net]) as $creates
      | ($cells | map(select(.kind == "put")) | sort_by(.n)) as $puts
      | ($puts | length) as $g
      | ((net("create#\($g)") + (net("create#\($g + 1)") // net("create#\($g)"))) / 2) as $cb
      | {round: $round, idle: $ia, creates: $creates, c: ($creates | med),
         batches: [$cells[] | select(.kind == "batch") | {k: .n, c: $cb, b: .net, kb: (.body_bytes / 1024), p50: .p50_ms}],
         slots: [$cells[] | select(.kind == "slot") | {k: .n, c: $cb, s: .net, kb: (.body_bytes / 1024), p50: .p50_ms}],
         reviews: [$cells[] | select(.kind == "review") | {c: $cb, r: .net, p50: .p50_ms}],
         w0: (first($puts[] | select(.n == 0)) // null | if . then .net else null end),
         by_n: [$puts | to_entries[] | .key as $g | .value as $w
           | ((net("create#\($g)") + (net("create#\($g + 1)") // net("create#\($g)"))) / 2) as $c
           | {n: $w.n, kb: ($w.body_bytes / 1024), c: $c, w: $w.net, u: net("put-free:\($w.n)"),
              p: net("jsonpatch:\($w.n)"), p50: $w.p50_ms, etcd: $w.enet}]})
  | . as $rounds
  | "ops per cell \($all.ops), \($all.concurrency) workers; apiserver CPU ms per op, net of the round median idle rate",
    ($rounds[] | . as $r
     | "",
       "round \(.round): creates c = \(.creates | map(f) | join(" ")) ms (median \(.c | f)); idle \(.idle | round) ms/s",
       "| N | body KB | c (around) | w put | u put-free | p jsonpatch | w/c | u/c | p/c | schema share of w | bound k=1 | bound k=\($k) | w p50 ms | etcd ms (w) |",
       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
       (.by_n[] | "| \(.n) | \(.kb | f) | \(.c | f) | \(.w | f) | \(.u | f) | \(.p | f) | \(.w / .c | f) | \(.u / .c | f) | \(if .p then .p / .c else null end | f) | \(if .w > 0 then (.w - .u) / .w else null end | f) | \(b(.c; .w; 1) | f) | \(b(.c; .w; $k) | f) | \(.p50 | f) | \(.etcd | f) |")),
    "",
    "reservation batches: b(k) = create of a batch of k entries + delete of the previous one; per admission b/k",
    "| round | k | body KB | c (around) | b(k) | b/k per admission | (b/k)/c | bound 1/(1 + b/(k·c)) | b p50 ms |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ($rounds[] | .round as $r | .batches[]
     | "| \($r) | \(.k) | \(.kb | f) | \(.c | f) | \(.b | f) | \(.b / .k | f) | \(.b / .k / .c | f) | \(b(.c; .b; .k) | f) | \(.p50 | f) |"),
    "",
    "ledger slots: s(k) = one in-place PUT of k entries; b(k) the batch cell of the same k in the round (– when none)",
    "| round | k | body KB | c (around) | s(k) | s/c | b(k) | b/c | b − s | b p50 | s p50 ms |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ($rounds[] | .round as $r | .batches as $bs | .slots[]
     | .k as $k | (first($bs[] | select(.k == $k)) // null) as $b
     | "| \($r) | \(.k) | \(.kb | f) | \(.c | f) | \(.s | f) | \(.s / .c | f) | \($b.b | f) | \(if $b then $b.b / .c else null end | f) | \(if $b then $b.b - .s else null end | f) | \($b.p50 | f) | \(.p50 | f) |"),
    "",
    "reviews: r = a ResourceBinding create that one webhook reviews; r − c = the apiserver CPU of one review hop; w(0) = put:0 of the round (a small status write, as karmada-frq writes)",
    "| round | c (around) | r | r − c | (r − c)/c | w(0) | r p50 ms |",
    "|---:|---:|---:|---:|---:|---:|---:|",
    ($rounds[] | .round as $r | .w0 as $w0 | .reviews[]
     | "| \($r) | \(.c | f) | \(.r | f) | \(.r - .c | f) | \((.r - .c) / .c | f) | \($w0 | f) | \(.p50 | f) |"),
    "",
    "errors: \([$all.cells[].errors] | add)",
    "",
    "model per round: w(N) ≈ w0 + e·N (ms); bounds of the P1 ratio (apiserver CPU only)",
    "| round | c | w0 | e (schema) | u0 | e (no schema) | p0 | e (patch) | 16 ns k=1: N=1, N=10, no-schema N=0 | 1 ns k=\($k): N=k, N=100 | k→∞ schema / no schema |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ($rounds[]
     | fit([.by_n[] | [.n, .w]]) as $w | fit([.by_n[] | [.n, .u]]) as $u
     | ([.by_n[] | select(.p != null) | [.n, .p]]) as $pp
     | (if ($pp | length) > 1 then fit($pp) else {w0: null, e: null} end) as $p
     | (.by_n | map({key: (.n | tostring), value: .}) | from_entries) as $n
     | def at($x; g): if $n[$x] then ($n[$x] | g) else null end;
       "| \(.round) | \(.c | f) | \($w.w0 | f) | \($w.e | f) | \($u.w0 | f) | \($u.e | f) | \($p.w0 | f) | \($p.e | f) | \(at("1"; b(.c; .w; 1)) | f), \(at("10"; b(.c; .w; 1)) | f), \(at("0"; b(.c; .u; 1)) | f) | \(b(.c; $w.w0 + $w.e * $k; $k) | f), \(at("100"; b(.c; .w; $k)) | f) | \(1 / (1 + $w.e / .c) | f) / \(1 / (1 + $u.e / .c) | f) |")
' "$OUT"
echo "raw: $OUT"
