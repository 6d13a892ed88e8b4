#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of outside input (fuzz/README.md), bounded in time.
#
# Installs what it needs (a C toolchain from apt when missing; cargo-afl from crates.io,
# which builds AFL++ from the source it ships; both cached under FUZZ_CACHE, default
# ${XDG_CACHE_HOME:-~/.cache}/karmada-quota/fuzz), builds the instrumented harness
# (fuzz/afl), runs each target from its seed corpus, prints executions per target and
# exits non-zero when any target found a crash or a hang.
#
# Environment:
#   FUZZ_SECONDS  fuzzing time per target (default 60)
#   FUZZ_EXECS    also stop a target after about this many executions (default: time only)
#   FUZZ_TARGETS  space-separated targets (default: all, see fuzz/src/lib.rs)
#   FUZZ_JOBS     targets fuzzed at the same time (default 1; one core each)
#   FUZZ_TIMEOUT  per-input timeout in ms before an input counts as a hang (default 1000)
#   FUZZ_OUT      where AFL++ writes queues, crashes and stats (default target/fuzz)
#   FUZZ_CACHE    cargo-afl (bin/), AFL++ (share/) and the harness build (target/); the
#                 build depends on this path, so keep it stable to build only once
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds="${FUZZ_SECONDS:-60}"
execs="${FUZZ_EXECS:-}"
targets="${FUZZ_TARGETS:-quantity resource_name quota_spec admission quota_status member_secret policy_review cluster_quota dashboard_inputs prometheus member_pods manifests}"
jobs="${FUZZ_JOBS:-1}"
hang_ms="${FUZZ_TIMEOUT:-1000}"
out="${FUZZ_OUT:-$root/target/fuzz}"
cache="${FUZZ_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/karmada-quota/fuzz}"
# The cargo-afl release whose `afl` crate fuzz/afl/Cargo.lock pins.
cargo_afl_version=0.18.2

step() { printf '\n==> %s\n' "$*"; }

step "install the fuzzing tools (cached after the first run)"
if ! command -v cc >/dev/null || ! command -v make >/dev/null; then
  apt-get update -q && apt-get install -yq --no-install-recommends build-essential
fi
export PATH="$cache/bin:$PATH"
# cargo-afl keeps the AFL++ it builds under $XDG_DATA_HOME/afl.rs: keep it in our cache.
export XDG_DATA_HOME="$cache/share"
if ! cargo afl --version 2>/dev/null | grep -q "^cargo-afl $cargo_afl_version "; then
  cargo install cargo-afl --version "$cargo_afl_version" --locked --root "$cache"
fi
if ! config_log=$(cargo afl config --build 2>&1) && ! grep -q "already built" <<<"$config_log"; then
  echo "$config_log" >&2
  exit 1
fi

step "build the instrumented harness (fuzz/afl)"
export CARGO_TARGET_DIR="$cache/target"
(cd fuzz/afl && cargo afl build --release --locked)
harness="$CARGO_TARGET_DIR/release/kq-fuzz"

# No terminal UI; tolerate a shared machine (CPU frequency scaling, busy cores, a core
# dump handler); stop at -V/-E without waiting for a "cycle" to finish.
export AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 AFL_NO_AFFINITY=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_FAST_CAL=1 AFL_NO_STARTUP_CALIBRATION=1

dicts_of() {
  local json="$XDG_DATA_HOME/afl.rs/AFLplusplus/dictionaries/json.dict"
  case "$1" in
    quantity) echo "-x fuzz/dict/quantity.dict" ;;
    resource_name) echo "-x fuzz/dict/resource_name.dict" ;;
    member_secret) echo "-x fuzz/dict/pem.dict -x fuzz/dict/kube.dict -x $json" ;;
    dashboard_inputs) echo "-x fuzz/dict/dashboard.dict" ;;
    manifests) echo "-x fuzz/dict/yaml.dict -x fuzz/dict/kube.dict" ;;
    *) echo "-x fuzz/dict/kube.dict -x $json" ;;
  esac
}

fuzz_one() {
  local t=$1 dir="$out/$1"
  rm -rf "$dir"
  mkdir -p "$dir"
  # shellcheck disable=SC2046 # the dictionary options are meant to split
  cargo afl fuzz -i "fuzz/corpus/$t" -o "$dir" -V "$seconds" ${execs:+-E "$execs"} \
    -t "$hang_ms" $(dicts_of "$t") -- "$harness" "$t" >"$dir/afl.log" 2>&1 || {
    echo "afl-fuzz failed for $t; last lines of $dir/afl.log:" >&2
    tail -20 "$dir/afl.log" >&2
    return 1
  }
}

step "fuzz each target for ${seconds}s${execs:+ or about $execs executions} ($jobs at a time; output in $out)"
mkdir -p "$out"
failed=0
running=0
for t in $targets; do
  if [ ! -d "fuzz/corpus/$t" ]; then
    echo "unknown target $t (no fuzz/corpus/$t)" >&2
    exit 2
  fi
  echo "  $t"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done

step "results"
stat() { sed -n "s/^$1 *: *//p" "$2"; }
printf '%-14s %14s %9s %10s %8s %7s %6s %6s\n' target executions seconds exec/s corpus map crashes hangs
findings=0
for t in $targets; do
  stats="$out/$t/default/fuzzer_stats"
  if [ ! -f "$stats" ]; then
    printf '%-14s (no stats: see %s)\n' "$t" "$out/$t/afl.log"
    failed=1
    continue
  fi
  crashes=$(stat saved_crashes "$stats")
  hangs=$(stat saved_hangs "$stats")
  printf '%-14s %14s %9s %10s %8s %7s %6s %6s\n' "$t" "$(stat execs_done "$stats")" \
    "$(stat run_time "$stats")" "$(stat execs_per_sec "$stats")" "$(stat corpus_count "$stats")" \
    "$(stat bitmap_cvg "$stats")" "$crashes" "$hangs"
  if [ "$crashes" != 0 ] || [ "$hangs" != 0 ]; then
    findings=1
  fi
done
if [ "$findings" = 1 ]; then
  echo
  echo "findings (replay one with: $harness <target> < FILE):"
  for t in $targets; do
    find "$out/$t/default/crashes" "$out/$t/default/hangs" -type f -name 'id:*' 2>/dev/null |
      sed "s|^|  $t: |"
  done
  exit 1
fi
exit "$failed"
