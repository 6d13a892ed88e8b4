#!/usr/bin/env bash
# What a test run really ran, read from its output and its skip log (e2e/src/skip.rs):
#
#   hack/test-summary.sh closing OUTPUT SKIP_LOG [NOTE...]
#       one line per test that did not really run (`did not run: <test> — <reason>`), each
#       NOTE on its own line, then one closing line `P passed, F failed, S skipped`
#   hack/test-summary.sh counts OUTPUT SKIP_LOG
#       `P F S N` (N: the tests of the skip log, already in S)
#   hack/test-summary.sh --self-test
#
# OUTPUT is what `cargo nextest run` printed (each `Summary [..] N tests run: ..` line
# counts; several runs add up), or `cargo test`'s (`test result: ..` lines). SKIP_LOG holds
# `<test>\t<reason>` lines (KQ_SKIP_LOG); a missing file is an empty log. A logged test
# that passed is counted skipped instead of passed: it passed without running what it is
# for. A logged test that failed stays failed. F counts every test that ran and did not
# pass (failed, timed out, could not start) plus those a cancelled run never started.
# Without any summary in OUTPUT the closing line says so instead of counting.
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'PY'
import os
import re
import sys
import tempfile

NEXTEST = re.compile(r"^\s*Summary \[[^\]]*\] (\d+)(?:/(\d+))? tests? run: (.*)$")
# nextest's line for a test that passed (LEAK: passed, output left open), also on a retry.
PASSED = re.compile(r"^(?:TRY \d+ )?(?:PASS|LEAK) \[")
LIBTEST = re.compile(
    r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored; \d+ measured; (\d+) filtered out"
)


def count(text, word):
    m = re.search(r"(\d+) " + word + r"\b", text)
    return int(m.group(1)) if m else 0


def totals(output):
    """(passed, failed, skipped) summed over the output's summaries, or None."""
    found, passed, failed, skipped = False, 0, 0, 0
    lines = output.splitlines()
    for line in lines:
        m = NEXTEST.match(line)
        if m:
            found = True
            ran = int(m.group(1))
            planned = int(m.group(2)) if m.group(2) else ran
            p = count(m.group(3), "passed")
            passed += p
            failed += ran - p + (planned - ran)
            skipped += count(m.group(3), "skipped")
    if found:
        return passed, failed, skipped
    for line in lines:
        m = LIBTEST.match(line)
        if m:
            found = True
            passed += int(m.group(1))
            failed += int(m.group(2))
            skipped += int(m.group(3))
    return (passed, failed, skipped) if found else None


def skip_log(path):
    """[(test, reason)] in the order logged."""
    if not os.path.exists(path):
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line:
                test, _, reason = line.partition("\t")
                out.append((test, reason))
    return out


def passed_in(output, test):
    """Whether the output shows `test` passing (nextest's PASS line, libtest's `ok`)."""
    for line in output.splitlines():
        s = line.strip()
        if PASSED.match(s) and s.endswith(" " + test):
            return True
        if s == f"test {test} ... ok" or s == f"test {test.split(' ')[-1]} ... ok":
            return True
    return False


def counts(output, log):
    t = totals(output)
    if t is None:
        return None
    passed, failed, skipped = t
    tests = list(dict.fromkeys(test for test, _ in log))
    moved = sum(1 for test in tests if passed_in(output, test))
    return passed - moved, failed, skipped + moved, len(tests)


def closing(output, log, notes):
    lines = [f"did not run: {test} — {reason}" for test, reason in log]
    lines += notes
    c = counts(output, log)
    if c is None:
        lines.append("no test summary in the output: the tests did not run to the end")
    else:
        lines.append(f"{c[0]} passed, {c[1]} failed, {c[2]} skipped")
    return "\n".join(lines)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


PASS_RUN = """\
        PASS [   0.012s] (1/3) kq-e2e::image the_image_runs
        PASS [   0.013s] (2/3) kq-cli::plugin_dist installs
        PASS [   0.014s] (3/3) kq-core engine::adds
────────────
     Summary [   0.204s] 3 tests run: 3 passed, 1 skipped
"""
FAIL_RUN = """\
        FAIL [   0.203s] (1/3) kq-e2e::upgrade helm_upgrade
        PASS [   0.013s] (2/3) kq-e2e::image the_image_runs
     TIMEOUT [  60.000s] (3/3) kq-e2e::queue slow
────────────
     Summary [  60.204s] 3 tests run: 1 passed, 1 failed, 1 timed out, 2 skipped
        FAIL [   0.203s] (1/3) kq-e2e::upgrade helm_upgrade
error: test run failed
"""
CANCELLED = "     Summary [   1.000s] 2/5 tests run: 1 passed (1 flaky), 1 failed, 0 skipped\n"
LIBTEST_RUN = """\
test the_image_runs ... ok
test result: ok. 4 passed; 0 failed; 2 ignored; 0 measured; 0 filtered out; finished in 0.01s
test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 3 filtered out; finished in 0.01s
"""


def self_test():
    cases = [
        # A logged test that passed moves from passed to skipped; notes follow the lines.
        (PASS_RUN, [("kq-e2e::image the_image_runs", "no archive (KQ_ALLOW_SKIP=image)")],
         ["not run here: 2 real-Karmada tests (make e2e-karmada)"],
         "did not run: kq-e2e::image the_image_runs — no archive (KQ_ALLOW_SKIP=image)\n"
         "not run here: 2 real-Karmada tests (make e2e-karmada)\n"
         "2 passed, 0 failed, 2 skipped"),
        # A logged test that failed stays failed; a timeout is a failure.
        (FAIL_RUN, [("kq-e2e::upgrade helm_upgrade", "no 0.1.0")], [],
         "did not run: kq-e2e::upgrade helm_upgrade — no 0.1.0\n1 passed, 2 failed, 2 skipped"),
        # Two runs add up; a test logged twice counts once.
        (PASS_RUN + FAIL_RUN,
         [("kq-e2e::image the_image_runs", "a"), ("kq-e2e::image the_image_runs", "b")], [],
         "did not run: kq-e2e::image the_image_runs — a\n"
         "did not run: kq-e2e::image the_image_runs — b\n3 passed, 2 failed, 4 skipped"),
        # A retried test that passed on its second try (flaky) passed; one that failed
        # only on a try does not count as passed.
        ("   TRY 1 FAIL [   1.000s] (1/1) kq::a t\n   TRY 2 PASS [   1.000s] (1/1) kq::a t\n"
         "     Summary [   2.000s] 1 test run: 1 passed (1 flaky), 0 skipped\n",
         [("kq::a t", "r"), ("kq::b u", "s")], [],
         "did not run: kq::a t — r\ndid not run: kq::b u — s\n0 passed, 0 failed, 1 skipped"),
        # A cancelled run: the tests it never started count as failed.
        (CANCELLED, [], [], "1 passed, 4 failed, 0 skipped"),
        # cargo test's output (test thread names).
        (LIBTEST_RUN, [("the_image_runs", "no archive")], [],
         "did not run: the_image_runs — no archive\n4 passed, 1 failed, 3 skipped"),
        # No summary (the build failed): nothing is counted.
        ("error: could not compile\n", [], [],
         "no test summary in the output: the tests did not run to the end"),
    ]
    for i, (output, log, notes, want) in enumerate(cases):
        got = closing(output, log, notes)
        if got != want:
            sys.exit(f"test-summary.sh self-test case {i}:\n--- want\n{want}\n--- got\n{got}")
    # The files as the scripts pass them: a tab-separated log, a missing log.
    with tempfile.TemporaryDirectory() as d:
        out, log = os.path.join(d, "out"), os.path.join(d, "skips.tsv")
        with open(out, "w") as f:
            f.write(PASS_RUN)
        if counts(read(out), skip_log(log)) != (3, 0, 1, 0):
            sys.exit("test-summary.sh self-test: a missing skip log is not an empty one")
        with open(log, "w") as f:
            f.write("kq-cli::plugin_dist installs\tno kubectl (KQ_ALLOW_SKIP=kubectl)\n")
        if counts(read(out), skip_log(log)) != (2, 0, 2, 1):
            sys.exit("test-summary.sh self-test: the skip log file is not read")
    print("test-summary.sh self-test: ok")


args = sys.argv[1:]
if args == ["--self-test"]:
    self_test()
elif len(args) >= 3 and args[0] == "closing":
    print(closing(read(args[1]), skip_log(args[2]), args[3:]))
elif len(args) == 3 and args[0] == "counts":
    c = counts(read(args[1]), skip_log(args[2]))
    if c is None:
        sys.exit(f"test-summary.sh: no test summary in {args[1]}")
    print(*c)
else:
    sys.exit("usage: hack/test-summary.sh closing OUTPUT SKIP_LOG [NOTE...] | counts OUTPUT SKIP_LOG | --self-test")
PY
