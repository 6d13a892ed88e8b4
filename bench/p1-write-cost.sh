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
# operation, less their idle rate measured at the start of the round. Entries are the
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
       "round \($r.round): c = \($r.c_ms | f) ms (create p50 \(cell("create").p50_ms | f) ms; etcd \(cell("create").etcd_net_ms | f) ms)",
       "| N | body KB | w put | u put-free | p jsonpatch | w/c | u/c | p/c | schema share of w | bound k=1 | bound k=\($k) | w p50 ms | etcd ms (w) |",
       "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
       ($r.by_n[] as $n
        | cell("put:\($n.n)") as $w
        | "| \($n.n) | \($w.body_bytes / 1024 | f) | \($n.w_ms | f) | \($n.u_ms | f) | \($n.p_ms | f) | \($n.w_over_c | r) | \($n.u_over_c | r) | \($n.p_over_c | r) | \($n.schema_share_of_w | r) | \($n.bound_k1 | r) | \($n.bound_k | r) | \($w.p50_ms | f) | \($w.etcd_net_ms | f) |")),
    "",
    "errors: \([.cells[].errors] | add)   idle apiserver ms/s per round: \([.idle[].apiserver_ms_per_s | round] | map(tostring) | join(" "))"
' "$OUT"
echo "raw: $OUT"
