#!/usr/bin/env bash
# The README's table of real-Karmada runs, written by `make e2e-karmada`
# (hack/e2e-karmada.sh), not typed: one row per Karmada version and feature-gate set,
# holding that pair's last run (date, passed, failed, how many did not run and why).
#
#   hack/karmada-results.sh FILE VERSION GATES OUTPUT SKIP_LOG
#       replaces VERSION's row for GATES (KARMADA_FEATURE_GATES, e.g.
#       Failover=true,GracefulEviction=true; empty: Karmada's defaults) in FILE's table
#       between the `karmada-results: begin` and `karmada-results: end` markers, or adds
#       it; the counts are hack/test-summary.sh's of OUTPUT (the runs' nextest output) and
#       SKIP_LOG (KQ_SKIP_LOG). The date is today's (UTC), or KQ_RESULTS_DATE.
#   hack/karmada-results.sh --self-test
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'PY'
import datetime
import os
import re
import subprocess
import sys
import tempfile

BEGIN = "<!-- karmada-results: begin"
END = "<!-- karmada-results: end -->"


def gates_cell(gates):
    """`A`, `B` for A=true,B=true; `C`=false for one set false; defaults for none."""
    cells = []
    for g in filter(None, (g.strip() for g in gates.split(","))):
        name, _, value = g.partition("=")
        on = value.strip().lower() == "true"
        cells.append(f"`{name.strip()}`" if on else f"`{name.strip()}`={value.strip()}")
    return ", ".join(cells) or "defaults"


def result_cell(date, counts, log_path):
    passed, failed, _skipped, not_run = counts
    cell = f"{date}: {passed} passed, {failed} failed"
    if not_run:
        names = []
        if os.path.exists(log_path):
            with open(log_path, encoding="utf-8") as f:
                names = re.findall(r"\(KQ_ALLOW_SKIP=([\w-]+)\)$", f.read(), re.M)
        cell += f", {not_run} did not run ({', '.join(sorted(set(names))) or 'skipped'})"
    return cell


def cells(row):
    return [c.strip() for c in row.strip().strip("|").split("|")]


def write_row(text, version, gates, result):
    """text with the row of (version, gates) replaced or appended inside the markers."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"karmada-results.sh: no '{BEGIN} … {END}' block")
    head = text[: text.index("\n", start) + 1]
    rows = text[len(head) : end].splitlines()
    new = f"| {version} | {gates} | {result} |"
    for i, row in enumerate(rows):
        c = cells(row)
        if row.startswith("|") and len(c) >= 2 and c[0] == version and c[1] == gates:
            rows[i] = new
            break
    else:
        while rows and not rows[-1].strip():
            rows.pop()
        rows.append(new)
    return head + "\n".join(rows) + "\n" + text[end:]


def counts(output, log):
    out = subprocess.run(
        ["hack/test-summary.sh", "counts", output, log], check=True, capture_output=True, text=True
    ).stdout.split()
    return tuple(int(n) for n in out)


def update(path, version, gates, output, log, date, say=True):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    row = result_cell(date, counts(output, log), log)
    text = write_row(text, version, gates_cell(gates), row)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    if say:
        print(f"{path}: | {version} | {gates_cell(gates)} | {row} |", file=sys.stderr)


README = """\
intro
<!-- karmada-results: begin (written by make e2e-karmada) -->
| Karmada | feature gates | last run |
| --- | --- | --- |
| v1.14.10 | defaults | 2026-11-26: passed |
| v1.18.2 | `Failover`, `GracefulEviction` | 2026-11-26: passed |
<!-- karmada-results: end -->
after
"""
OUTPUT = """\
        PASS [   1.000s] (1/3) karmada-quota-e2e::karmada_workloads a_raycluster
        PASS [   1.000s] (2/3) karmada-quota-e2e::karmada one
        FAIL [   1.000s] (3/3) karmada-quota-e2e::karmada two
     Summary [   3.000s] 3 tests run: 2 passed, 1 failed, 0 skipped
        PASS [   1.000s] (1/1) karmada-quota-e2e::karmada_failover a_failover
     Summary [   1.000s] 1 test run: 1 passed, 0 skipped
"""
LOG = (
    "karmada-quota-e2e::karmada_workloads a_raycluster\tno gate (KQ_ALLOW_SKIP=karmada-gates)\n"
    "karmada-quota-e2e::karmada_failover a_failover\tno gate (KQ_ALLOW_SKIP=karmada-gates)\n"
)


def self_test():
    with tempfile.TemporaryDirectory() as d:
        readme, output, log = (os.path.join(d, n) for n in ("README.md", "out", "skips.tsv"))
        for path, text in ((readme, README), (output, OUTPUT), (log, LOG)):
            with open(path, "w") as f:
                f.write(text)
        # Same version and gates: the row is replaced; the gates' order and `=true` as typed.
        update(readme, "v1.18.2", "Failover=true, GracefulEviction=true", output, log, "2026-12-01", False)
        # A new pair is added after the last row, inside the markers.
        update(readme, "v1.19.0", "", output, os.path.join(d, "none.tsv"), "2026-12-02", False)
        with open(readme) as f:
            got = f.read()
    want = README.replace(
        "| v1.18.2 | `Failover`, `GracefulEviction` | 2026-11-26: passed |",
        "| v1.18.2 | `Failover`, `GracefulEviction` | 2026-12-01: 1 passed, 1 failed, "
        "2 did not run (karmada-gates) |\n"
        "| v1.19.0 | defaults | 2026-12-02: 3 passed, 1 failed |",
    )
    if got != want:
        sys.exit(f"karmada-results.sh self-test:\n--- want\n{want}\n--- got\n{got}")
    if gates_cell("A=true,B=false") != "`A`, `B`=false":
        sys.exit("karmada-results.sh self-test: a gate set false is not shown as such")
    print("karmada-results.sh self-test: ok")


args = sys.argv[1:]
if args == ["--self-test"]:
    self_test()
elif len(args) == 5:
    date = os.environ.get("KQ_RESULTS_DATE") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    update(*args, date)
else:
    sys.exit("usage: hack/karmada-results.sh FILE VERSION GATES OUTPUT SKIP_LOG | --self-test")
PY
