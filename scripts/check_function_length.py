#!/usr/bin/env python3
"""No function in src/ runs over 150 lines, unless its header says why it must (issue 42).

Usage: check_function_length.py [ROOT] [--limit N] [--allowlist FILE]

Scans ROOT/src/**/*.{cc,h,cu,cuh} (ROOT: the repository, by default this script's parent's
parent) and lists every function whose definition runs over the limit (150 lines), counted from
the first line of its signature (a `template <...>` line included) to its closing brace, lambdas
and local classes inside it included. Exits 1 if it lists any that is not excused or the
allowlist holds an entry that matches no long function, 2 on a usage error, 0 otherwise. The ctest
`function_length` runs it (tests/CMakeLists.txt, label unit).

A long function is excused in two ways:

  * a marker in the comment block right above its signature (the contiguous `//` lines that end
    on the line just above the signature's first line), which says why it must be long:

        // weft: long function: <reason>

    The reason is required: a marker without one excuses nothing.

  * an entry `path:function` in scripts/function_length_allowlist.txt (path from the repository
    root, function as this script reports it, e.g. `src/weft/cli/tune_command.cc:run_tune`), for
    a function someone is already rewriting. An entry that matches no function over the limit is
    an error, so that the list cannot outlive the rewrite it waits for.

How it finds functions: it blanks comments, string and character literals (raw strings
included) and preprocessor lines, then matches braces. A `{` at namespace or class scope
(namespaces, `extern "C"` and class/struct/union bodies are walked into, so member functions
defined inside a class are checked too) opens a function body when the declaration before it
holds a parenthesis and no top-level `=`; the braces of a constructor's member initializers
(`: a_{x}`), of default arguments, of enums and of variable initializers are passed over. A
conditional (#if/#else/#endif) whose branches each balance their braces is read whole; one whose
branches do not (`#if A` `void f(int a) {` `#else` `void f() {` `#endif`) is read as its first
branch only.

What it misses: a lambda assigned to a namespace-scope variable (`auto f = [] { ... };`) is read
as an initializer, not a function; functions that a macro defines are not seen; nor are the later
branches of an unbalanced conditional; a macro invoked without a `;` at namespace scope just
above a function lengthens that function's signature by its lines. Before scanning, it checks
itself on a few snippets of those cases (self_test), so that a change to it cannot blind it.
"""

import argparse
import os
import re
import sys

LIMIT = 150
EXTENSIONS = (".cc", ".h", ".cu", ".cuh")
MARKER_RE = re.compile(r"^\s*//\s*weft:\s*long function:\s*\S")
ALLOWLIST = os.path.join("scripts", "function_length_allowlist.txt")


def settle_conditionals(masked, directives):
    """Blanks, in masked text, the #else / #elif branches of each conditional whose branches do
    not each balance their braces (`#if A` `void f(int) {` `#else` `void f() {` `#endif`): the
    first branch alone is then read. Conditionals whose branches all balance are read whole.
    directives: [(line index, directive word)] in order."""
    lines = masked.split("\n")
    stack = []  # per open conditional: the line indexes of its directives
    for index, word in directives:
        if word in ("if", "ifdef", "ifndef"):
            stack.append([index])
        elif word.startswith(("el", "endif")) and stack:
            stack[-1].append(index)
            if word != "endif":
                continue
            marks = stack.pop()
            branches = list(zip(marks, marks[1:]))
            if len(branches) < 2:
                continue
            balanced = all(
                sum(lines[k].count("{") - lines[k].count("}") for k in range(lo + 1, hi)) == 0
                for lo, hi in branches)
            if not balanced:
                for lo, hi in branches[1:]:
                    for k in range(lo + 1, hi):
                        lines[k] = " " * len(lines[k])
    return "\n".join(lines)


def literal_end(text, i, quote):
    """Where the string or character literal opened by the quote at i ends: past its closing
    quote, or at the end of its line when it has none (so that lines keep their numbers)."""
    j = i + 1
    while j < len(text) and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    return min(j + 1, len(text)) if j < len(text) and text[j] == quote else min(j, len(text))


def mask(text):
    """Returns text with comments, literals and preprocessor lines replaced by spaces (newlines
    kept, and the quotes of string literals, so `extern "C"` still reads `extern " "`), and the
    later branches of unbalanced conditionals blanked (settle_conditionals)."""
    out = []
    directives = []  # (line index, word) of each preprocessor directive
    n = len(text)
    i = 0
    line_start = True  # only whitespace since the last newline

    def blank(s):
        return "".join(c if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            # A preprocessor line, with its backslash continuations.
            j = i
            while j < n:
                k = text.find("\n", j)
                if k == -1:
                    j = n
                    break
                if text[k - 1] == "\\":
                    j = k + 1
                    continue
                j = k
                break
            word = re.match(r"#\s*(\w*)", text[i:j]).group(1)
            directives.append((text.count("\n", 0, i), word))
            out.append(blank(text[i:j]))
            i = j
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j == -1 else j
            out.append(blank(text[i:j]))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j == -1 else j + 2
            out.append(blank(text[i:j]))
            i = j
            continue
        if c == '"':
            # The token before the quote: a raw string's prefix ends in R.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] == "_"):
                k -= 1
            prefix = text[k:i]
            if prefix in ("R", "u8R", "uR", "UR", "LR"):
                open_paren = text.find("(", i + 1)
                delim = text[i + 1:open_paren]
                end = text.find(")" + delim + '"', open_paren)
                j = n if end == -1 else end + len(delim) + 2
            else:
                j = literal_end(text, i, '"')
            closed = j - i >= 2 and text[j - 1] == '"'
            out.append('"' + blank(text[i + 1:j - 1]) + '"' if closed else blank(text[i:j]))
            i = j
            continue
        if c == "'":
            # A digit separator (1'000'000) when the token before it is a number.
            k = i
            while k > 0 and (text[k - 1].isalnum() or text[k - 1] in "_."):
                k -= 1
            if k < i and text[k].isdigit():
                out.append(" ")
                i += 1
                continue
            j = literal_end(text, i, "'")
            out.append(blank(text[i:j]))
            i = j
            continue
        out.append(c)
        i += 1
    return settle_conditionals("".join(out), directives)


def strip_template_prefix(header):
    """`template <...>` (possibly several) removed from the front of a declaration."""
    while True:
        m = re.match(r"\s*template\s*<", header)
        if not m:
            return header
        depth, j = 1, m.end()
        while j < len(header) and depth:
            if header[j] == "<":
                depth += 1
            elif header[j] == ">":
                depth -= 1
            j += 1
        header = header[j:]


def strip_attributes(header):
    header = re.sub(r"\[\[.*?\]\]", " ", header, flags=re.S)
    for word in ("alignas", "__attribute__", "__declspec", "__launch_bounds__"):
        while True:
            m = re.search(r"\b" + word + r"\s*\(", header)
            if not m:
                break
            depth, j = 1, m.end()
            while j < len(header) and depth:
                depth += {"(": 1, ")": -1}.get(header[j], 0)
                j += 1
            header = header[:m.start()] + " " + header[j:]
    return header


def top_level(header):
    """Yields (index, char) of header's characters outside (), [] and {}."""
    depth = 0
    for j, ch in enumerate(header):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0:
            yield j, ch


def has_assignment(header):
    for j, ch in top_level(header):
        if ch != "=":
            continue
        before = header[j - 1] if j > 0 else ""
        after = header[j + 1] if j + 1 < len(header) else ""
        if before in "=!<>+-*/%&|^" or after == "=":
            continue
        if re.search(r"\boperator\s*$", header[:j]):
            continue
        return True
    return False


def function_name(header):
    """The (qualified) name a function header declares, e.g. `Gpt::backward`, `operator<<`."""
    header = strip_attributes(strip_template_prefix(header))
    qualifiers = r"((?:[\w~]+\s*(?:<[^()]*?>)?\s*::\s*)*)"
    m = re.search(qualifiers + r"operator\b", header)
    if m:
        rest = header[m.end():].lstrip()
        symbol = "()" if rest.startswith("()") else rest.split("(", 1)[0].strip()
        space = " " if symbol[:1].isalpha() else ""  # operator bool
        return re.sub(r"\s+", "", m.group(1)) + "operator" + space + symbol
    # The first '(' outside template arguments opens the parameter list.
    angle = 0
    for j, ch in enumerate(header):
        if ch == "<":
            angle += 1
        elif ch == ">" and angle > 0 and header[j - 1] != "-":
            angle -= 1
        elif ch == "(" and angle == 0:
            m = re.search(qualifiers + r"(~?\w+\s*(?:<[^()]*>)?)\s*$", header[:j])
            return re.sub(r"\s+", "", m.group(1) + m.group(2)) if m else "?"
    return "?"


def ctor_initializer_colon(header):
    """True when a constructor's member initializer list follows its parameters: a single `:`
    outside brackets after the parameter list's `(`."""
    first = header.find("(")
    return any(ch == ":" and j > first and header[j - 1] != ":" and header[j + 1:j + 2] != ":"
               for j, ch in top_level(header))


def classify(header):
    """What a `{` at namespace or class scope opens, from the text before it: 'namespace',
    'class', 'function' or 'other' (an initializer, an enum, a member initializer's braces)."""
    bare = strip_attributes(strip_template_prefix(header)).strip()
    if re.match(r"(inline\s+)?namespace\b", bare) or re.match(r'extern\s*"\s*"\s*$', bare):
        return "namespace"
    if re.match(r"(typedef\s+)?(class|struct|union)\b", bare) and "(" not in bare:
        return "class"
    if re.match(r"enum\b", bare) or "(" not in bare or has_assignment(bare):
        return "other"
    if ctor_initializer_colon(bare) and re.search(r"[\w>]\s*$", bare):
        return "other"  # a member's brace initializer, `: a_{x}`
    return "function"


def find_functions(text):
    """Returns [(first_line, last_line, name)] of the function definitions in masked text."""
    functions = []
    # What each open '{' opened: namespace, class, function, other (passed over), and for the
    # namespaces and classes the declaration their parent was reading when they opened.
    scopes = [("namespace", None)]
    header_start = None  # where the declaration being read began (namespace or class scope)
    start_line = 0
    paren = 0  # () and [] depth within that declaration
    depth = 0  # brace depth inside a function body or a passed-over block
    function = None  # (first_line, name) of the function whose body is open
    line = 1
    for i, ch in enumerate(text):
        if ch == "\n":
            line += 1
            continue
        kind = scopes[-1][0]
        if kind in ("function", "other"):
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:
                scopes.pop()
                if kind == "function":
                    functions.append((function[0], line, function[1]))
                    header_start = None
            continue
        # Namespace or class scope: reading a declaration.
        if ch.isspace():
            continue
        if header_start is None:
            header_start, start_line, paren = i, line, 0
        if ch in "([":
            paren += 1
        elif ch in ")]":
            paren -= 1
        elif ch == ";" and paren == 0:
            header_start = None
        elif ch == ":" and kind == "class" and re.fullmatch(
                r"(public|private|protected)\s*", text[header_start:i]):
            header_start = None
        elif ch == "{":
            header = text[header_start:i]
            opened = "other" if paren else classify(header)
            if opened in ("namespace", "class"):
                scopes.append((opened, (header_start, start_line, paren)))
                header_start = None
            else:
                scopes.append((opened, None))
                depth = 1
                if opened == "function":
                    function = (start_line, function_name(header))
        elif ch == "}" and len(scopes) > 1:
            closed, saved = scopes.pop()
            # After a class's '}' its declaration goes on to the ';' (`struct X {...} x;`).
            header_start, start_line, paren = saved if closed == "class" else (None, 0, 0)
    return functions


def marked(lines, first_line):
    """True when the `//` block right above line first_line (1-based) holds the marker."""
    k = first_line - 2
    while k >= 0 and lines[k].lstrip().startswith("//"):
        if MARKER_RE.match(lines[k]):
            return True
        k -= 1
    return False


def load_allowlist(path):
    entries = {}
    if not os.path.exists(path):
        return entries
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            entry = raw.split("#", 1)[0].strip()
            if not entry:
                continue
            if ":" not in entry:
                raise ValueError(f"{path}:{n}: expected path:function, got '{entry}'")
            entries[entry] = n
    return entries


SELF_TEST = r"""namespace a {
// "}" in a comment, '}' in a char, /* } */ and a 1'000 digit separator.
int f(int x) {
  const char* s = "}\"}";
  char c = '}';
  auto raw = R"x(})x";
  int n = 1'000;
  return x + n + c + s[0] + raw[0];
}
class Foo : public Bar {
 public:
  Foo(int x) : a_{x}, b_(x) {
    auto g = [&] { return a_; };
  }
  template <typename T>
  T get() const { return T{}; }
  bool operator==(const Foo& o) const { return a_ == o.a_; }
 private:
  int a_ = 0;
  std::vector<int> v_{1, 2};
};
enum class E { A, B };
const std::map<int, int> kTable = {{1, 2}, {3, 4}};
#if defined(X)
void h(int a) {
#else
void h() {
#endif
}
extern "C" {
void Foo::Bar<int>::baz(std::function<void(int)> cb = [] {}) noexcept {}
}
}  // namespace a
"""
SELF_TEST_EXPECT = [(3, 9, "f"), (12, 14, "Foo"), (15, 16, "get"), (17, 17, "operator=="),
                    (25, 29, "h"), (31, 31, "Foo::Bar<int>::baz")]


def self_test():
    found = find_functions(mask(SELF_TEST))
    if found != SELF_TEST_EXPECT:
        print(f"self test: expected {SELF_TEST_EXPECT}\n  found {found}", file=sys.stderr)
        return False
    return True


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.dirname(here))
    parser.add_argument("--limit", type=int, default=LIMIT)
    parser.add_argument("--allowlist", default=None)
    args = parser.parse_args(argv)
    if not self_test():
        return 2
    allowlist_path = args.allowlist or os.path.join(args.root, ALLOWLIST)
    try:
        allowed = load_allowlist(allowlist_path)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2

    src = os.path.join(args.root, "src")
    if not os.path.isdir(src):
        print(f"no src/ under {args.root}", file=sys.stderr)
        return 2
    offenders, excused, used = [], [], set()
    count = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for name in sorted(filenames):
            if not name.endswith(EXTENSIONS):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, args.root)
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            lines = text.split("\n")
            for first, last, fn in find_functions(mask(text)):
                count += 1
                length = last - first + 1
                if length <= args.limit:
                    continue
                where = f"{rel}:{first}: {fn} runs {length} lines"
                key = f"{rel}:{fn}"
                if key in allowed:
                    used.add(key)
                    excused.append(where + " (allowlisted)")
                elif marked(lines, first):
                    excused.append(where + " (marked)")
                else:
                    offenders.append(where)
    for line in excused:
        print(f"excused: {line}")
    stale = sorted(set(allowed) - used, key=allowed.get)
    for key in stale:
        print(f"{allowlist_path}:{allowed[key]}: '{key}' matches no function over {args.limit} "
              "lines: remove the entry")
    for line in offenders:
        print(f"{line} (over {args.limit}): split it into parts of one purpose each, or say why "
              "it must be long with '// weft: long function: <reason>' right above it")
    print(f"{count} functions read, {len(offenders)} over {args.limit} lines unexcused, "
          f"{len(excused)} excused, {len(stale)} stale allowlist entries")
    return 1 if offenders or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
