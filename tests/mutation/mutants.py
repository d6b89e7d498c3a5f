#!/usr/bin/env python3
"""The mutant list of the mutation check (tests/mutation/mutants.txt): parse, check, apply, report.

run.sh drives the check; this file does the parts that are easier with strings and JSON than in
bash. Subcommands:

  ids LIST [--only ID,...]         the mutants' ids, one a line (unknown --only ids: an error)
  field LIST ID KEY                one field of a mutant (what, file, tests)
  check LIST ROOT [ID...]          every edit of every mutant applies to ROOT's files (each find
                                   text occurs exactly once, after the mutant's earlier edits)
  apply LIST ROOT ID               plants mutant ID into ROOT (after checking it applies)
  test-targets BUILD JSON          the build targets that tests of `ctest --show-only=json-v1`
                                   run: every program under BUILD their commands name
  sync SRC DEST                    copies the files named on stdin (NUL-separated, relative to
                                   SRC) to DEST, only those whose bytes differ (a rebuild then
                                   recompiles only what changed), and removes DEST's other files
                                   outside DEST/build and DEST/logs
  report RESULTS.tsv MD JSON [K=V...]  the table of verdicts, as Markdown and as JSON

The list's format (see the header of mutants.txt): a block per mutant, opened by `== ID`, with
`what:`, `file:` and `tests:` lines, then one or more edits, each a `--- find` and a `--- replace`
section whose lines are taken verbatim (trailing blank lines dropped).
"""

import json
import os
import re
import subprocess
import sys

ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class ListError(Exception):
    pass


def parse(path):
    """Returns [{id, what, file, tests, edits: [(find, replace)], line}] in file order."""
    mutants, cur, section, buf = [], None, None, []

    def close_section():
        nonlocal section, buf
        if section is None:
            return
        while buf and buf[-1].strip() == "":
            buf.pop()
        text = "\n".join(buf)
        if section == "find":
            cur["edits"].append([text, None])
        else:
            if not cur["edits"] or cur["edits"][-1][1] is not None:
                raise ListError(f"{path}:{cur['line']}: mutant {cur['id']}: '--- replace' "
                                "without its '--- find'")
            cur["edits"][-1][1] = text
        section, buf = None, []

    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if line.startswith("== "):
            close_section()
            mid = line[3:].strip()
            if not ID_RE.match(mid):
                raise ListError(f"{path}:{n}: bad mutant id '{mid}' (lower case, digits, '-')")
            cur = {"id": mid, "what": "", "file": "", "tests": "", "edits": [], "line": n}
            mutants.append(cur)
        elif line in ("--- find", "--- replace"):
            if cur is None:
                raise ListError(f"{path}:{n}: '{line}' before any '== ID'")
            close_section()
            section = line[4:]
        elif section is not None:
            buf.append(line)
        elif cur is not None and re.match(r"^(what|file|tests):", line):
            key, value = line.split(":", 1)
            cur[key] = value.strip()
        elif line.strip() == "" or line.startswith("#"):
            continue
        else:
            raise ListError(f"{path}:{n}: unexpected line outside a find/replace section: {line!r}")
    close_section()

    seen = set()
    for m in mutants:
        where = f"{path}:{m['line']}: mutant {m['id']}"
        if m["id"] in seen:
            raise ListError(f"{where}: the id is used twice")
        seen.add(m["id"])
        for key in ("what", "file", "tests"):
            if not m[key]:
                raise ListError(f"{where}: no '{key}:' line")
        if not m["edits"]:
            raise ListError(f"{where}: no '--- find' / '--- replace' edit")
        for find, replace in m["edits"]:
            if replace is None:
                raise ListError(f"{where}: a '--- find' without its '--- replace'")
            if find == "":
                raise ListError(f"{where}: an empty '--- find'")
            if find == replace:
                raise ListError(f"{where}: an edit that changes nothing")
    return mutants


def by_id(mutants, mid):
    for m in mutants:
        if m["id"] == mid:
            return m
    raise ListError(f"no mutant '{mid}' in the list")


def mutated_text(m, root):
    """The mutant's file with its edits applied, or ListError saying which edit does not apply."""
    path = os.path.join(root, m["file"])
    if not os.path.isfile(path):
        raise ListError(f"mutant {m['id']}: {m['file']} does not exist")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for k, (find, replace) in enumerate(m["edits"], 1):
        count = text.count(find)
        if count != 1:
            first = find.split("\n")[0].strip()
            raise ListError(f"mutant {m['id']}: edit {k} of {len(m['edits'])}: the find text "
                            f"(first line: {first!r}) occurs {count} times in {m['file']}, "
                            "not once: update tests/mutation/mutants.txt to the code")
        text = text.replace(find, replace)
    return path, text


def cmd_ids(args):
    mutants = parse(args[0])
    ids = [m["id"] for m in mutants]
    if len(args) > 2 and args[1] == "--only":
        wanted = [x for x in args[2].split(",") if x]
        for w in wanted:
            by_id(mutants, w)
        ids = [i for i in ids if i in wanted]
    print("\n".join(ids))


def cmd_field(args):
    print(by_id(parse(args[0]), args[1])[args[2]])


def cmd_check(args):
    mutants = parse(args[0])
    root = args[1]
    chosen = [by_id(mutants, i) for i in args[2:]] if len(args) > 2 else mutants
    errors = []
    for m in chosen:
        try:
            mutated_text(m, root)
        except ListError as e:
            errors.append(str(e))
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


def cmd_apply(args):
    m = by_id(parse(args[0]), args[2])
    path, text = mutated_text(m, args[1])
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def cmd_test_targets(args):
    build = os.path.realpath(args[0])
    with open(args[1], encoding="utf-8") as f:
        names = {t["name"] for t in json.load(f).get("tests", [])}
    # The tests' commands, from the CTestTestfile.cmake files: `ctest --show-only` leaves out the
    # command of a test whose program is not built yet.
    commands = {}
    for top, _, files in os.walk(build):
        if "CTestTestfile.cmake" in files:
            with open(os.path.join(top, "CTestTestfile.cmake"), encoding="utf-8") as f:
                for m in re.finditer(r"^add_test\(\[=\[(.*?)\]=\] (.*)\)$", f.read(), re.M):
                    commands[m.group(1)] = m.group(2)
    outputs = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"], check=True,
                             capture_output=True, text=True).stdout
    known = {line.split(":", 1)[0] for line in outputs.splitlines()}
    targets = set()
    for name in sorted(names):
        if name not in commands:
            raise ListError(f"test {name}: no add_test in {build}'s CTestTestfile.cmake files")
        # A program of the build, alone or inside an argument (-DWEFT=<path>).
        for p in re.findall(r"(/[^\s;=\"']+)", commands[name]):
            if not p.startswith(build + os.sep):
                continue
            rel = os.path.relpath(p, build)
            base = os.path.basename(rel)
            if base in known:
                targets.add(base)  # the phony alias: the target's name
            elif rel in known:
                targets.add(rel)
    print("\n".join(sorted(targets)))


def cmd_sync(args):
    src, dest = os.path.realpath(args[0]), os.path.realpath(args[1])
    names = [n for n in sys.stdin.buffer.read().decode("utf-8").split("\0") if n]
    wanted, copied = set(), 0
    for n in names:
        s = os.path.join(src, n)
        if not os.path.isfile(s) or os.path.islink(s):
            continue  # deleted in the working tree, or a link (none are tracked)
        wanted.add(n)
        d = os.path.join(dest, n)
        with open(s, "rb") as f:
            data = f.read()
        if os.path.isfile(d):
            with open(d, "rb") as f:
                if f.read() == data:
                    continue
        os.makedirs(os.path.dirname(d), exist_ok=True)
        with open(d, "wb") as f:
            f.write(data)
        os.chmod(d, os.stat(s).st_mode & 0o777)
        copied += 1
    removed = 0
    for top, dirs, files in os.walk(dest):
        rel_top = os.path.relpath(top, dest)
        if rel_top == ".":
            dirs[:] = [x for x in dirs if x not in ("build", "logs")]
        for f in files:
            rel = os.path.normpath(os.path.join(rel_top, f))
            if rel not in wanted:
                os.remove(os.path.join(top, f))
                removed += 1
    print(f"{len(wanted)} files, {copied} copied, {removed} removed")


def cmd_report(args):
    rows = []
    with open(args[0], encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            mid, what, verdict, caught_by, seconds = line.split("\t")
            rows.append({"id": mid, "what": what, "verdict": verdict,
                         "caught_by": [x for x in caught_by.split(" ") if x],
                         "seconds": round(float(seconds), 1)})
    meta = {}
    for kv in args[3:]:
        k, v = kv.split("=", 1)
        meta[k] = v
    with open(args[2], "w", encoding="utf-8") as f:
        json.dump({**meta, "mutants": rows}, f, indent=1)
        f.write("\n")
    caught = sum(r["verdict"] == "caught" for r in rows)
    with open(args[1], "w", encoding="utf-8") as f:
        f.write("# Mutation check\n\n")
        for k, v in meta.items():
            f.write(f"- {k}: {v}\n")
        f.write(f"- caught: {caught} of {len(rows)}\n\n")
        f.write("| mutant | what | verdict | caught by | seconds |\n")
        f.write("|---|---|---|---|---:|\n")
        for r in rows:
            by = ", ".join(f"`{t}`" for t in r["caught_by"]) or "-"
            f.write(f"| `{r['id']}` | {r['what']} | **{r['verdict']}** | {by} | "
                    f"{r['seconds']:.0f} |\n")
    width = max([len(r["id"]) for r in rows] + [6])
    print(f"{'mutant':<{width}}  {'verdict':<11}  {'seconds':>7}  caught by / what")
    for r in rows:
        print(f"{r['id']:<{width}}  {r['verdict']:<11}  {r['seconds']:>7.0f}  "
              f"{' '.join(r['caught_by']) or '-'}")
        print(f"{'':<{width}}  {'':<11}  {'':>7}  ({r['what']})")
    print(f"caught {caught} of {len(rows)}")


COMMANDS = {"ids": (cmd_ids, 1), "field": (cmd_field, 3), "check": (cmd_check, 2),
            "apply": (cmd_apply, 3), "test-targets": (cmd_test_targets, 2), "sync": (cmd_sync, 2),
            "report": (cmd_report, 3)}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    fn, nargs = COMMANDS[sys.argv[1]]
    if len(sys.argv) - 2 < nargs:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    try:
        sys.exit(fn(sys.argv[2:]) or 0)
    except ListError as e:
        print(f"mutation: {e}", file=sys.stderr)
        sys.exit(3)
