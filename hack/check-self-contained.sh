#!/usr/bin/env bash
# Fails when a tracked file refers to a path outside the repository: the repository must
# build and test from a clone with nothing beside it.
#
#   hack/check-self-contained.sh              # check the tracked files of this repository
#   hack/check-self-contained.sh --self-test  # check the checker on a scratch repository
#
# What counts as a reference outside (each reported as file:line):
# - a relative path that climbs with `..` (`../x`, `dir/../..`) and, from the file's own
#   directory or any directory above it inside the repository, cannot land on something
#   the repository has (a tracked path, or cargo's `target`): `../core` in
#   webhook/Cargo.toml is fine, `$REPO_ROOT/../outside` or `"/../../outside"` after
#   CARGO_MANIFEST_DIR are not;
# - include_str!/include_bytes!/include! of a literal path that is not a tracked file
#   relative to the including file;
# - an absolute path under a user's or a machine's checkout area (/work, /home, /Users,
#   /root, /mnt, /srv).
# It also fails on work-log wording outside docs/decisions/ and CHANGELOG.md, where the
# history of the project lives: docs and comments say what holds, not how it came to be.
# Refused (case-insensitive): "issue <number>", "issues <number>", "issue #<number>",
# "review" + "finding", "session <number>", "found and fixed", "each fixed", "before this
# change", "this session", "(round <number>)". Files listed in hack/worklog-pending.txt are skipped by this check only,
# until their wording is rewritten (the list is meant to be empty, then deleted).
# This script itself is not checked (its self-test holds such paths on purpose).
set -euo pipefail
cd "$(dirname "$0")/.."

exec python3 - "$@" <<'PY'
import os
import re
import subprocess
import sys
import tempfile

SELF = "hack/check-self-contained.sh"
# Untracked names inside the repository that paths may point at.
UNTRACKED_OK = {"target"}

# A run of `..` segments touching a slash: `../x`, `/..`, `../../`. Not `[..]`,
# `..Default::default()` or an ellipsis.
CLIMB = re.compile(
    r"(?:(?<=^)|(?<=[\s\"'`(=:,\[{/]))"  # starts a path (or follows a slash)
    r"(?P<run>\.\.(?:/\.\.)*)"  # .. or ../.. or ../../..
    r"(?P<after>/(?P<head>[\w.@+-]*)|(?=[\s\"'`),;:\]}]|$))"
)
INCLUDE = re.compile(r"\binclude(?:_str|_bytes)?!\(\s*\"(?P<path>[^\"]*)\"\s*\)")
WORKLOG = re.compile(
    r"\bissues? #?[0-9]|\breview\s+findings?\b|\bsession [0-9]|\bfound and fixed\b"
    r"|\beach fixed\b|\bbefore this change\b|\bthis session\b|\(round [0-9]+\)",
    re.IGNORECASE,
)
# Where the project's history belongs, so work-log wording is fine there.
HISTORY = ("docs/decisions/", "CHANGELOG.md")
# Files whose work-log wording is still to be rewritten; skipped by the WORKLOG check only.
PENDING = "hack/worklog-pending.txt"
ABSOLUTE = re.compile(
    r"(?<![\w.~/$-])/(?:work|home|Users|root|mnt|srv)(?:/[^\s\"'`)]*)?(?=[\s\"'`)]|$)"
)


def tracked_files(root):
    done = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True)
    if done.returncode != 0:
        sys.exit(f"check-self-contained: not a git checkout? {done.stderr.decode().strip()}")
    return [p for p in done.stdout.decode().split("\0") if p]


def known_paths(files):
    """Every tracked file and every directory above one, as repository-relative paths."""
    known = set(UNTRACKED_OK)
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts) + 1):
            known.add("/".join(parts[:i]))
    return known


def climb_problem(file, run, head, known):
    """Why `<run>/<head>` written in `file` points outside, or None."""
    n = run.count("..")
    dirs = file.split("/")[:-1]
    # Try the file's directory, then each directory above it.
    for depth in range(len(dirs), -1, -1):
        if n > depth:
            break
        landing = dirs[: depth - n]
        if not head or head in (".", "..") or "/".join(landing + [head]) in known:
            return None
    if not head:
        return f"'{run}' climbs above the repository root"
    return f"'{run}/{head}' is outside the repository (or names nothing in it)"


def pending(root):
    """The files listed in PENDING (one path a line, `#` comments), if it exists."""
    try:
        with open(os.path.join(root, PENDING), encoding="utf-8") as fh:
            lines = [l.split("#", 1)[0].strip() for l in fh]
    except FileNotFoundError:
        return set()
    return {l for l in lines if l}


def check(root):
    files = tracked_files(root)
    known = known_paths(files)
    skip_worklog = pending(root) | {PENDING}
    problems = []
    for file in files:
        if file == SELF:
            continue
        worklog = not (file.startswith(HISTORY) or file in skip_worklog)
        try:
            with open(os.path.join(root, file), encoding="utf-8") as fh:
                lines = fh.read().splitlines()
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules, deleted but not yet staged
        for no, line in enumerate(lines, 1):
            for m in CLIMB.finditer(line):
                run = m.group("run")
                if not ("/" in run or m.group("after") or line[: m.start()].endswith("/")):
                    continue  # a lone `..`: `[..]`, `(..)` in Rust, `cd ..`
                why = climb_problem(file, run, m.group("head") or "", known)
                if why:
                    problems.append((file, no, why, line))
            for m in INCLUDE.finditer(line):
                target = os.path.normpath(os.path.join(os.path.dirname(file), m.group("path")))
                if m.group("path").startswith("/") or target not in files:
                    problems.append(
                        (file, no, f"includes '{m.group('path')}', not a file of the repository", line)
                    )
            for m in ABSOLUTE.finditer(line):
                problems.append((file, no, f"absolute path '{m.group(0)}'", line))
            for m in WORKLOG.finditer(line) if worklog else ():
                problems.append(
                    (file, no, f"work-log wording '{m.group(0)}' (history goes to "
                     "docs/decisions/ or CHANGELOG.md)", line)
                )
    return len(files), problems


def report(n_files, problems):
    if not problems:
        print(f"self-contained: {n_files} tracked files refer to nothing outside the repository")
        return 0
    for file, no, why, line in problems:
        print(f"{file}:{no}: {why}\n    {line.strip()}", file=sys.stderr)
    print(
        f"\nFAILED: {len(problems)} problem(s): references to paths outside the repository "
        "(a clone with nothing beside it would not build or test) or work-log wording",
        file=sys.stderr,
    )
    return 1


# The self-test: (file, content, lines that must be reported). The work-log samples are
# built from pieces so that this file itself holds none of the wording it refuses.
ISSUE, FINDING, SESSION = "issue", "review" + " finding", "session"
SCRATCH = {
    "core/Cargo.toml": ('[dependencies]\nx = { path = "../runtime" }\n', []),
    "runtime/src/lib.rs": (
        "let a = &v[..];\nlet b = S { ..Default::default() };\nlet c = 0..n;\n"
        'let d = include_str!("../data.txt");\n'
        'let e = include_str!("../../testdata/a.yaml");\n'
        'let f = include_str!("missing.txt");\n'
        'let g = include_bytes!("/work/x.bin");\n',
        [6, 7, 7],
    ),
    "runtime/data.txt": ("wait...\n", []),
    "testdata/a.yaml": ("a: 1\n", []),
    "core/src/t.rs": (
        'const A: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../outside/a.yaml");\n'
        'const B: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/a.yaml");\n'
        'let c = repo_root().join("../outside/examples");\n',
        [1, 3],
    ),
    "e2e/cp/cp.sh": (
        'ROOT=$(cd "$(dirname "$0")/../.." && pwd)\n'
        'd=${DIR:-$ROOT/../outside/crds}\n'
        "ls ../../target/debug\n"
        "cp x /home/me/y\n"
        "cd ../../..\n",
        [2, 4, 5],
    ),
    "README.md": (
        "a[..] and (..) are not paths.\n"
        "See [core](core/Cargo.toml) and [up](../README.md), or `/work/outside`.\n"
        "cache under ~/.cache/x, logs in /var/log, https://example.org/home/x.\n",
        [2, 2],
    ),
    "docs/a.md": (
        f"Fixed in {ISSUE} 21, a {FINDING}.\n"
        f"The t{ISSUE} 3 and the {ISSUE}s list are fine; so is a {SESSION} token.\n"
        f"{ISSUE.title()}s #4 and 5 (round 2) were found and fixed this {SESSION}.\n"
        "Measured in round 2 of three (round 1: none first; Round 2's cells).\n",
        [1, 1, 3, 3, 3, 3],
    ),
    "docs/decisions/0001-x.md": (f"Context: {ISSUE} 21, a {FINDING}.\n", []),
    "CHANGELOG.md": (f"- {SESSION} 9: {ISSUE} 24 closed.\n", []),
    "core/src/pending.rs": (f"// {ISSUE} 26: still to be reworded\n", []),
    "hack/worklog-pending.txt": ("# reworded later\ncore/src/pending.rs\n", []),
}


def self_test():
    with tempfile.TemporaryDirectory() as root:
        subprocess.run(["git", "init", "-q", root], check=True)
        for path, (content, _) in SCRATCH.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as fh:
                fh.write(content)
        subprocess.run(["git", "-C", root, "add", "-A"], check=True)
        _, problems = check(root)
    got = sorted((f, no) for f, no, _, _ in problems)
    want = sorted((f, no) for f, (_, lines) in SCRATCH.items() for no in lines)
    if got != want:
        print("self-test FAILED", file=sys.stderr)
        for f, no, why, line in problems:
            print(f"  reported {f}:{no}: {why}", file=sys.stderr)
        print(f"  expected {want}", file=sys.stderr)
        return 1
    print(f"self-test: the {len(want)} planted references and nothing else reported")
    return 0


if sys.argv[1:] == ["--self-test"]:
    sys.exit(self_test())
if sys.argv[1:]:
    print(__doc__ or "usage: check-self-contained.sh [--self-test]", file=sys.stderr)
    sys.exit(2)
sys.exit(report(*check(".")))
PY
