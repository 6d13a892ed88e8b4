#!/usr/bin/env bash
# The e2e suite against real Karmada (v1.14): karmada-controller-manager, karmada-scheduler
# and karmada-webhook run against the loopback control plane (etcd + 3 kube-apiservers:
# the Karmada control plane and members member1, member2), with the project's webhook and
# controller started by the tests (e2e/tests/karmada.rs). Optional: `make test` does not
# run it.
#
#   hack/e2e-karmada.sh            # (or: make e2e-karmada)
#   hack/e2e-karmada.sh --up-only  # start everything, print how to use it, wait for Ctrl-C
#
# Inputs (environment):
#   KARMADA_SRC      a Karmada v1.14.x source tree (a checkout or an unpacked release):
#                    its CRDs (charts/karmada/_crds/bases) and webhook configuration
#                    (artifacts/deploy/webhook-configuration.yaml) are read from it.
#                    Unset: $CACHE/karmada-src-$KARMADA_VERSION, made from KARMADA_GIT_DIR
#                    (a local clone or mirror of Karmada holding tag $KARMADA_VERSION:
#                    only charts/ and artifacts/ are taken) when that is set.
#   KARMADA_BIN_DIR  where karmada-controller-manager, karmada-scheduler and karmada-webhook
#                    built from that tree are (default $CACHE/karmada-$KARMADA_VERSION).
#                    This script does not build Karmada: build the three commands with
#                    Karmada's own instructions and put them there.
#   KARMADA_VERSION  the tag the above are (default v1.14.10; the suite also runs on v1.18.2,
#                    docs/karmada.md).
#   KARMADA_FEATURE_GATES  --feature-gates for karmada-controller-manager, -scheduler and
#                    -webhook (default: none, Karmada's defaults), e.g. on v1.18:
#                    MultiplePodTemplatesScheduling=true,Failover=true,GracefulEviction=true
#                    (v1.14 knows no MultiplePodTemplatesScheduling and refuses it). Tests
#                    that need a gate left off do not run: KQ_ALLOW_SKIP=karmada-gates
#                    (docs/testing.md) lets them pass, and the closing lines name them. The
#                    controller-manager runs with --enable-no-execute-taint-eviction (the
#                    failover test, run alone after the others, taints member1).
#   KARMADA_CONTROLLER_MANAGER_ARGS, KARMADA_SCHEDULER_ARGS  extra flags (space-separated)
#                    for those two, e.g. --kube-api-qps=1000 --kube-api-burst=2000 (bench/karmada.sh
#                    lifts the client throttle this way).
#   KARMADA_RUN_DIR  where the control plane and logs live (default <target>/e2e-karmada).
#   KARMADA_E2E_TESTS  run only these test binaries of e2e/tests/ (space-separated, e.g.
#                    karmada_queue_wait) instead of every karmada* one; `make
#                    e2e-karmada-queue-wait` sets it with KQ_QUEUE_WAITS=30,180,600 (the
#                    waits of e2e/tests/karmada_queue_wait.rs, seconds; default 30).
#   KARMADA_SKIP_BUILD=1  with --up-only: do not build the project (bench/karmada.sh builds
#                    release binaries itself).
#   CACHE            ${XDG_CACHE_HOME:-~/.cache}/karmada-quota (as controlplane.sh).
#
# Garbage collection: no kube-controller-manager runs, so a deleted Deployment's binding is
# not collected; the tests delete the binding as the garbage collector would (docs/karmada.md).
#
# Results: the whole suite's run replaces this version and gate set's row of the README's
# Karmada table (hack/karmada-results.sh: date, passed, failed, did not run).
#
# Everything listens on 127.0.0.1. Logs: <target>/e2e-karmada/logs/. Stops everything it
# started, and exits non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

KARMADA_VERSION=${KARMADA_VERSION:-v1.14.10}
KARMADA_FEATURE_GATES=${KARMADA_FEATURE_GATES:-}
gate_args=()
if [[ -n $KARMADA_FEATURE_GATES ]]; then
    gate_args=(--feature-gates="$KARMADA_FEATURE_GATES")
fi
cache=${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota
bin_dir=${KARMADA_BIN_DIR:-$cache/karmada-$KARMADA_VERSION}
target=${CARGO_TARGET_DIR:-$root/target}
dir=${KARMADA_RUN_DIR:-$target/e2e-karmada}
read -r -a cm_args <<<"${KARMADA_CONTROLLER_MANAGER_ARGS:-}"
read -r -a sched_args <<<"${KARMADA_SCHEDULER_ARGS:-}"
up_only=0
case ${1:-} in
--up-only) up_only=1 ;;
"") ;;
-h | --help)
    sed -n '2,51p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*)
    echo "e2e-karmada.sh: unknown argument $1 (try --help)" >&2
    exit 2
    ;;
esac

t_start=$SECONDS
step() { printf '\n==> %s\n' "$*" >&2; }
die() {
    printf 'e2e-karmada.sh: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------------------
step "Karmada $KARMADA_VERSION: source tree and binaries"
if [[ -z ${KARMADA_SRC:-} ]]; then
    KARMADA_SRC=$cache/karmada-src-$KARMADA_VERSION
    if [[ ! -d $KARMADA_SRC/charts && -n ${KARMADA_GIT_DIR:-} ]]; then
        echo "    unpacking charts/ and artifacts/ of $KARMADA_VERSION from $KARMADA_GIT_DIR" >&2
        git --git-dir "$KARMADA_GIT_DIR" rev-parse --verify -q "$KARMADA_VERSION^{commit}" >/dev/null ||
            die "$KARMADA_GIT_DIR has no $KARMADA_VERSION (KARMADA_GIT_DIR must be a clone or mirror of Karmada)"
        mkdir -p "$KARMADA_SRC.tmp"
        git --git-dir "$KARMADA_GIT_DIR" archive "$KARMADA_VERSION" -- charts artifacts |
            tar -x -C "$KARMADA_SRC.tmp"
        rm -rf "$KARMADA_SRC"
        mv "$KARMADA_SRC.tmp" "$KARMADA_SRC"
    fi
fi
crd_root=$KARMADA_SRC/charts/karmada/_crds/bases
webhook_config=$KARMADA_SRC/artifacts/deploy/webhook-configuration.yaml
if [[ ! -d $crd_root || ! -f $webhook_config ]]; then
    die "no Karmada source tree at '$KARMADA_SRC' (it needs charts/karmada/_crds/bases and
artifacts/deploy/webhook-configuration.yaml). Set KARMADA_SRC to a Karmada $KARMADA_VERSION
checkout or unpacked release, or KARMADA_GIT_DIR to a local clone of Karmada. See docs/karmada.md."
fi
missing=()
for c in karmada-controller-manager karmada-scheduler karmada-webhook; do
    [[ -x $bin_dir/$c ]] || missing+=("$c")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    die "${missing[*]} not found in $bin_dir. Build cmd/controller-manager, cmd/scheduler and
cmd/webhook of Karmada $KARMADA_VERSION (KARMADA_SRC) as Karmada's own docs say, and put
karmada-controller-manager, karmada-scheduler and karmada-webhook in $bin_dir (or set
KARMADA_BIN_DIR). See docs/karmada.md."
fi
echo "    source $KARMADA_SRC" >&2
echo "    binaries $bin_dir" >&2

step "install the control plane's prerequisites (cached after the first run)"
e2e/controlplane/controlplane.sh install >/dev/null

# The workspace with make test's targets and features (a warm target dir rebuilds only the
# e2e crate), plus the e2e crate's karmada feature.
features=(--workspace --features karmada-quota-e2e/karmada)
if [[ $up_only -eq 1 && ${KARMADA_SKIP_BUILD:-0} == 1 ]]; then
    step "not building the project (KARMADA_SKIP_BUILD=1)"
else
    step "build the project's binaries and the Karmada test binary"
    cargo build --locked "${features[@]}" --all-targets
fi

# ---------------------------------------------------------------------------------------
# Control plane with Karmada's CRDs
# ---------------------------------------------------------------------------------------
stop_all() {
    e2e/controlplane/controlplane.sh down "$dir" >"$target/e2e-karmada-down.log" 2>&1 || true
}
stop_all
rm -rf "$dir"
mkdir -p "$dir/karmada-crds"
trap stop_all EXIT
# Ctrl-C or a TERM: exit, so that the EXIT trap stops everything.
trap 'exit 130' INT TERM

# One directory of CRDs for controlplane.sh: Karmada's, plus the project's Cluster stand-in
# when the tree has none (the Cluster API is served by karmada-aggregated-apiserver).
find "$crd_root" -name '*.yaml' -exec cp {} "$dir/karmada-crds/" \;
if ! grep -lq 'name: clusters.cluster.karmada.io' "$dir"/karmada-crds/*.yaml; then
    cp crds/karmada/cluster.karmada.io_clusters.yaml "$dir/karmada-crds/"
fi

step "start etcd and 3 kube-apiservers on 127.0.0.1 with Karmada's CRDs"
KARMADA_CRDS_DIR=$dir/karmada-crds e2e/controlplane/controlplane.sh up "$dir" 3 --owner-pid $$
# shellcheck disable=SC1091 # written by controlplane.sh up
source "$dir/env"

k() {
    local i=$1
    shift
    kubectl --kubeconfig "$dir/kubeconfig-$i" --cache-dir "$dir/kubectl-cache" "$@"
}

step "the project's stand-in CRDs of workloads (RayCluster, PyTorchJob, FlinkDeployment, the Widget of the interpreter test) in every apiserver"
for i in 0 1 2; do
    k "$i" apply -f e2e/karmada/workload-crds/ >/dev/null
    k "$i" wait --for condition=established --timeout=60s -f e2e/karmada/workload-crds/ >/dev/null
done

# Prints N free TCP ports on 127.0.0.1.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PY
}

# Starts "$@" in its own session with output to logs/$1.log and records it in $dir/pids, so
# that `controlplane.sh down` (and its watchdog) stops it too: every command line here
# names $dir (the kubeconfig), which is how `down` knows the pid is still ours.
spawn() {
    local name=$1
    shift
    setsid "$@" >"$dir/logs/$name.log" 2>&1 </dev/null &
    echo "$! $name" >>"$dir/pids"
    echo "    $name: pid $!, log $dir/logs/$name.log" >&2
}

# wait_url WHAT URL [CURL ARGS...]: polls URL (60 s).
wait_url() {
    local what=$1 url=$2 deadline=$((SECONDS + 60))
    shift 2
    until curl -fsS -o /dev/null --max-time 2 "$@" "$url" 2>/dev/null; do
        if ((SECONDS >= deadline)); then
            tail -n 30 "$dir/logs/$what.log" >&2 || true
            die "$what not ready at $url after 60 s"
        fi
        sleep 0.5
    done
}

# ---------------------------------------------------------------------------------------
# Members
# ---------------------------------------------------------------------------------------
step "register member1, member2 as Karmada stores members (Cluster + Secret, syncMode Push)"
k 0 create namespace karmada-system >/dev/null
k 0 create namespace karmada-cluster >/dev/null
for i in 1 2; do
    port_var=APISERVER_${i}_PORT
    crt=$dir/apiserver-$i/apiserver.crt
    tls="secretRef: {namespace: karmada-cluster, name: member$i}"
    if ! grep -q certificate-authority-data "$dir/kubeconfig-$i"; then
        tls="$tls
  insecureSkipTLSVerification: true"
    fi
    k 0 -n karmada-cluster create secret generic "member$i" \
        --from-literal=token="$TOKEN" --from-file=caBundle="$crt" >/dev/null
    k 0 apply -f - >/dev/null <<EOF
apiVersion: cluster.karmada.io/v1alpha1
kind: Cluster
metadata:
  name: member$i
  labels: {e2e.karmada-quota/member: "true"}
spec:
  syncMode: Push
  apiEndpoint: https://127.0.0.1:${!port_var}
  $tls
EOF
    # No kubelet: one Ready Node with allocatable capacity, which Karmada's resource
    # modeling reads (dynamic-weight Divided scheduling divides by it). Nodes take their
    # status on create.
    k "$i" create -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: member$i-node
  labels: {kubernetes.io/hostname: member$i-node}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
  conditions:
    - type: Ready
      status: "True"
      reason: KubeletReady
      message: a stand-in node (no kubelet)
      lastHeartbeatTime: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      lastTransitionTime: "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
EOF
done

# ---------------------------------------------------------------------------------------
# Karmada's components
# ---------------------------------------------------------------------------------------
# One identity per component, so that the webhook's log tells who sent each request: the
# admin token, impersonating user karmada-<component> in group system:masters.
for c in karmada-webhook karmada-controller-manager karmada-scheduler; do
    sed "s/^    token: .*/&\n    as: $c\n    as-groups: [system:masters]/" "$dir/kubeconfig-0" >"$dir/kubeconfig-$c"
    chmod 600 "$dir/kubeconfig-$c"
done

mapfile -t ports < <(free_ports 7)
wh_port=${ports[0]}

step "karmada-webhook on 127.0.0.1:$wh_port, its webhook configurations pointed there"
certs=$dir/karmada-webhook-certs
mkdir -p "$certs"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
    -subj /CN=karmada-webhook-e2e-ca -keyout "$certs/ca.key" -out "$certs/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=127.0.0.1 \
    -keyout "$certs/tls.key" -out "$certs/tls.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >"$certs/leaf.ext"
openssl x509 -req -days 30 -in "$certs/tls.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
    -set_serial 1 -extfile "$certs/leaf.ext" -out "$certs/tls.crt" 2>/dev/null
spawn karmada-webhook "$bin_dir/karmada-webhook" --kubeconfig "$dir/kubeconfig-karmada-webhook" \
    --bind-address 127.0.0.1 --secure-port "$wh_port" --cert-dir "$certs" \
    --metrics-bind-address "127.0.0.1:${ports[1]}" \
    --health-probe-bind-address "127.0.0.1:${ports[2]}" "${gate_args[@]}" --v=2
wait_url karmada-webhook "https://127.0.0.1:$wh_port/readyz" --cacert "$certs/ca.crt"
sed -e "s#https://karmada-webhook.karmada-system.svc:443/#https://127.0.0.1:$wh_port/#" \
    -e "s#{{caBundle}}#$(base64 -w0 "$certs/ca.crt")#" "$webhook_config" \
    >"$dir/karmada-webhook-configuration.yaml"
k 0 apply -f "$dir/karmada-webhook-configuration.yaml" >/dev/null

# Controllers for APIs kube-apiserver 1.20 lacks (EndpointSlice v1, …) or components not
# run here (karmada-agent, karmada-search, remedy) are off.
controllers='*,-endpointSlice,-serviceExport,-serviceImport,-endpointsliceCollect,-endpointsliceDispatch,-multiclusterservice,-unifiedAuth,-federatedHorizontalPodAutoscaler,-cronFederatedHorizontalPodAutoscaler,-agentcsrapproving,-remedy'
step "karmada-controller-manager and karmada-scheduler (no leader election)"
spawn karmada-controller-manager "$bin_dir/karmada-controller-manager" \
    --kubeconfig "$dir/kubeconfig-karmada-controller-manager" --leader-elect=false \
    --controllers="$controllers" \
    --enable-no-execute-taint-eviction=true \
    --metrics-bind-address "127.0.0.1:${ports[3]}" \
    --health-probe-bind-address "127.0.0.1:${ports[4]}" "${gate_args[@]}" "${cm_args[@]}" --v=2
spawn karmada-scheduler "$bin_dir/karmada-scheduler" \
    --kubeconfig "$dir/kubeconfig-karmada-scheduler" \
    --leader-elect=false --metrics-bind-address "127.0.0.1:${ports[5]}" \
    --health-probe-bind-address "127.0.0.1:${ports[6]}" "${gate_args[@]}" "${sched_args[@]}" --v=2
wait_url karmada-controller-manager "http://127.0.0.1:${ports[4]}/healthz"
wait_url karmada-scheduler "http://127.0.0.1:${ports[6]}/healthz"

step "wait for both Clusters to be Ready (Karmada's cluster status controller)"
k 0 wait --for condition=Ready --timeout=120s cluster/member1 cluster/member2 >&2 || {
    tail -n 40 "$dir/logs/karmada-controller-manager.log" >&2
    die "the member Clusters did not become Ready"
}
{
    echo "KARMADA_VERSION=$KARMADA_VERSION"
    echo "KARMADA_WEBHOOK_PORT=$wh_port"
    echo "KARMADA_FEATURE_GATES=$KARMADA_FEATURE_GATES"
} >>"$dir/env"
echo "    up in $((SECONDS - t_start)) s" >&2

if [[ $up_only -eq 1 ]]; then
    cat >&2 <<EOF

Karmada is running against $dir (logs in $dir/logs).
  kubectl --kubeconfig $dir/kubeconfig-0 get clusters
  E2E_CONTROLPLANE_DIR=$dir E2E_KARMADA_DIR=$dir E2E_KARMADA_FEATURE_GATES=$KARMADA_FEATURE_GATES \\
    cargo nextest run --workspace --features karmada-quota-e2e/karmada --test 'karmada*' \\
      --run-ignored all
Press Ctrl-C to stop everything.
EOF
    sleep infinity &
    sleeper=$!
    trap 'kill "$sleeper" 2>/dev/null; exit 130' INT TERM
    wait "$sleeper"
fi

# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------
step "run the Karmada e2e tests (e2e/tests/karmada*.rs)"
export E2E_CONTROLPLANE_DIR=$dir E2E_KARMADA_DIR=$dir E2E_KARMADA_FEATURE_GATES=$KARMADA_FEATURE_GATES
# A test that needs a gate KARMADA_FEATURE_GATES leaves off cannot run on this Karmada (v1.14
# refuses MultiplePodTemplatesScheduling): allowed by name, logged, and named at the end.
export KQ_ALLOW_SKIP=${KQ_ALLOW_SKIP:+$KQ_ALLOW_SKIP,}karmada-gates KQ_SKIP_LOG=$dir/logs/skips.tsv
rm -f "$KQ_SKIP_LOG"
t_tests=$SECONDS
status=0 # pipefail: a failing test run fails the pipe through tee
read -r -a only <<<"${KARMADA_E2E_TESTS:-}"
if [[ ${#only[@]} -gt 0 ]]; then
    selected=()
    for t in "${only[@]}"; do
        [[ -f e2e/tests/$t.rs ]] || die "KARMADA_E2E_TESTS names $t, but e2e/tests/$t.rs does not exist"
        selected+=(--test "$t")
    done
    if cargo nextest --version >/dev/null 2>&1; then
        cargo nextest run --locked "${features[@]}" "${selected[@]}" --run-ignored all \
            --no-fail-fast --test-threads 2 --success-output immediate 2>&1 | tee "$dir/logs/tests.log" || status=$?
    else
        cargo test --locked "${features[@]}" "${selected[@]}" --no-fail-fast \
            -- --include-ignored --test-threads 2 --nocapture 2>&1 | tee "$dir/logs/tests.log" || status=$?
    fi
elif cargo nextest --version >/dev/null 2>&1; then
    cargo nextest run --locked "${features[@]}" --test 'karmada*' --run-ignored all \
        -E 'not binary(karmada_failover)' \
        --no-fail-fast --test-threads 2 --success-output immediate 2>&1 | tee "$dir/logs/tests.log" || status=$?
    # Alone: it taints member1, which would evict the other tests' placements.
    cargo nextest run --locked "${features[@]}" --test karmada_failover --run-ignored all \
        --no-fail-fast --success-output immediate 2>&1 | tee -a "$dir/logs/tests.log" || status=$?
else
    echo "(cargo-nextest not found: using cargo test)"
    cargo test --locked "${features[@]}" --test karmada --test karmada_workloads \
        --test karmada_interpreter --test karmada_queue --test karmada_queue_wait --no-fail-fast \
        -- --include-ignored --test-threads 2 --nocapture 2>&1 | tee "$dir/logs/tests.log" || status=$?
    cargo test --locked "${features[@]}" --test karmada_failover --no-fail-fast \
        -- --include-ignored --nocapture 2>&1 | tee -a "$dir/logs/tests.log" || status=$?
fi
stop_all
trap - EXIT
printf '\ne2e-karmada: Karmada %s (gates: %s), tests %s in %d s (whole run %d s); logs in %s/logs\n' \
    "$KARMADA_VERSION" "${KARMADA_FEATURE_GATES:-defaults}" "$([[ $status -eq 0 ]] && echo passed || echo FAILED)" \
    $((SECONDS - t_tests)) $((SECONDS - t_start)) "$dir" >&2
# The whole suite's run is the README's row for this version and gate set (a subset,
# KARMADA_E2E_TESTS, is not).
if [[ ${#only[@]} -eq 0 ]]; then
    hack/karmada-results.sh README.md "$KARMADA_VERSION" "$KARMADA_FEATURE_GATES" \
        "$dir/logs/tests.log" "$KQ_SKIP_LOG" || status=1
fi
hack/test-summary.sh closing "$dir/logs/tests.log" "$KQ_SKIP_LOG" || status=1
exit "$status"
