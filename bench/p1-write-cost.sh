#!/usr/bin/env bash
# P1's cost model, measured (issue 15): what one status write costs the apiserver against
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
# of the one-namespace bound), BIN_DIR (target/release), BENCH_DIR (target/bench).
# Needs: cargo build --release -p karmada-quota-bench; controlplane.sh install.
# Output: a table per round on stdout; raw JSON in $BENCH_DIR/write-cost.json.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${1:-3}
OPS=${OPS:-300}
CONCURRENCY=${CONCURRENCY:-4}
ENTRIES=${ENTRIES:-0,1,10,100,500}
BATCH=${BATCH:-14}
OUT=$WORK/write-cost.json

[[ -x $KQ_BENCH ]] || die "$KQ_BENCH missing: cargo build --release -p karmada-quota-bench"
command -v jq >/dev/null || die "jq missing (controlplane.sh install brings it)"
trap bench_cleanup EXIT
bench_up

api=$(cp_pid apiserver-0)
etcd=$(cp_pid etcd)
[[ $(cat "/proc/$api/comm" 2>/dev/null) == kube-apiserver* ]] || die "pid $api is not the apiserver"
log "write-cost: $ROUNDS rounds, $OPS ops per cell, $CONCURRENCY workers, N in $ENTRIES (apiserver pid $api, etcd $etcd)"
"$KQ_BENCH" write-cost --kubeconfig "$KUBECONFIG" --apiserver-pid "$api" --etcd-pid "$etcd" \
    --rounds "$ROUNDS" --ops "$OPS" --concurrency "$CONCURRENCY" --entries "$ENTRIES" \
    --batch "$BATCH" >"$OUT"

jq -r --arg k "$BATCH" '
  def f: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
  def r: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
  . as $all
  | "ops per cell \(.ops), \(.concurrency) workers; apiserver CPU ms per op, net of idle",
    (.rounds[] as $r
     | ($all.cells | map(select(.round == $r.round))) as $cells
     | def cell($name): ($cells[] | select(.cell == $name));
       "",
       "round \($r.round): creates c = \($r.creates_ms | map(f) | join(" ")) ms (median \($r.c_ms | f); p50 \(cell("create#0").p50_ms | f) ms; etcd \(cell("create#0").etcd_net_ms | f) ms)",
       "| N | body KB | c (around) | w put | u put-free | p jsonpatch | w/c | u/c | p/c | schema share of w | bound k=1 | bound k=\($k) | w p50 ms | etcd ms (w) |",
       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
       ($r.by_n[] as $n
        | cell("put:\($n.n)") as $w
        | "| \($n.n) | \($w.body_bytes / 1024 | f) | \($n.c_ms | f) | \($n.w_ms | f) | \($n.u_ms | f) | \($n.p_ms | f) | \($n.w_over_c | r) | \($n.u_over_c | r) | \($n.p_over_c | r) | \($n.schema_share_of_w | r) | \($n.bound_k1 | r) | \($n.bound_k | r) | \($w.p50_ms | f) | \($w.etcd_net_ms | f) |")),
    "",
    "errors: \([.cells[].errors] | add)   idle apiserver ms/s before the cells: median \([.cells[].idle_apiserver_ms_per_s] | sort | .[length / 2 | floor] | round), max \([.cells[].idle_apiserver_ms_per_s] | max | round)"
' "$OUT"

# The model per round: w(N) ≈ w0 + e·N (least squares over the N measured; u, p alike),
# and the bounds it implies. One namespace: a batch of k writes at least its own k entries,
# so its best case is N = k (nothing else pending); k → ∞ leaves 1 / (1 + e/c).
jq -r --argjson k "$BATCH" '
  def f: (. * 100 | round / 100 | tostring);
  def fit($pts): ($pts | length) as $m | ($pts | map(.[0]) | add / $m) as $mx
    | ($pts | map(.[1]) | add / $m) as $my
    | ([$pts[] | (.[0] - $mx) * (.[0] - $mx)] | add) as $sxx
    | (if $sxx > 0 then ([$pts[] | (.[0] - $mx) * (.[1] - $my)] | add) / $sxx else 0 end) as $e
    | {w0: ($my - $e * $mx), e: $e};
  def b($c; $w; $k): 1 / (1 + $w / ($k * $c));
  . as $all
  | "",
    "model per round: w(N) ≈ w0 + e·N (ms); bounds of the P1 ratio (apiserver CPU only)",
    "| round | c | w0 | e (schema) | u0 | e (no schema) | p0 | e (patch) | 16 ns k=1: N=1, N=10, no-schema N=0 | 1 ns k=\($k): N=k, N=100 | k→∞ schema / no schema |",
    "|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    (.rounds[] | . as $r
     | [.by_n[] | [.n, .w_ms]] as $wp | [.by_n[] | [.n, .u_ms]] as $up
     | [.by_n[] | select(.p_ms != null) | [.n, .p_ms]] as $pp
     | fit($wp) as $w | fit($up) as $u
     | (if ($pp | length) > 1 then fit($pp) else {w0: null, e: null} end) as $p
     | (.by_n | map({key: (.n | tostring), value: .}) | from_entries) as $n
     | "| \(.round) | \(.c_ms | f) | \($w.w0 | f) | \($w.e | f) | \($u.w0 | f) | \($u.e | f) | \($p.w0 // 0 | f) | \($p.e // 0 | f) | \(if $n["1"] then b($n["1"].c_ms; $n["1"].w_ms; 1) | f else "–" end), \(if $n["10"] then b($n["10"].c_ms; $n["10"].w_ms; 1) | f else "–" end), \(if $n["0"] then b($n["0"].c_ms; $n["0"].u_ms; 1) | f else "–" end) | \(b(.c_ms; $w.w0 + $w.e * $k; $k) | f), \(if $n["100"] then b($n["100"].c_ms; $n["100"].w_ms; $k) | f else "–" end) | \(1 / (1 + $w.e / .c_ms) | f) / \(1 / (1 + $u.e / .c_ms) | f) |")
' "$OUT"
echo "raw: $OUT"
