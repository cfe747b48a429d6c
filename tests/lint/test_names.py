#!/usr/bin/env python3
"""test_names.py - "a prefix is its file's stem everywhere", kept by a test.

Every function a project header declares (or defines: a static inline function in a
header is as exported as a prototype) must begin with the header's stem followed by
an underscore, or be the stem itself: kv_pool.h may declare kv_pool_reserve, not
kv_reserve. A module split over several .c files shares one prefix, and its
internal header X_impl.h uses X's prefix (config/cfg_impl.h declares cfg_*, like
cfg.h). Only functions are checked; types, macros and variables are not.

The scanner reads C, not text lines: it drops comments, string literals and
preprocessor lines (with their continuations), skips the bodies of structs, unions,
enums and inline functions, and splits what is left at top level into declarations,
so multi-line prototypes, attributes, function-pointer members and typedefs, and
functions that return function pointers come out right. ALL-CAPS names followed by
"(" at top level are macro invocations, not functions.

Exceptions: the three C-library-like helpers (EXCEPTIONS below). Headers still to be
renamed are listed in TODO and reported as TAP SKIPs until they are removed from it.

Test 1 runs the scanner on tests/lint/fixtures/names_fixture.h, whose expected
violations are listed in its first comment, so the test fails if the scanner stops
catching bad names. Then one TAP line per header under the scanned directories.

TAP output. Usage: test_names.py [SOURCE_ROOT]   (default: two levels above this file)
       test_names.py --check HEADER...           (print the violations of HEADERs)
Python 3 standard library only.
"""
import fnmatch
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DIRS = ["engine", "server", "cli", "config", "bench", "cuda"]

# C-library-like helpers whose names read as the C library's own (xmalloc, log_info,
# time_now; f32_bits; bf16_to_f32): their callers everywhere would only get longer.
EXCEPTIONS = {
    "engine/util/util.h",
    "engine/util/fast_exp.h",
    "engine/model/dtype.h",
}

# Index headers: one header declares the launchers of many kernel files (a .cu file
# cannot share a C header of its own with nvcc and cc alike as simply), so each name
# must begin with the stem of the file that defines it, found by its extern "C"
# definition in the glob's files: cuda_kernels.h declares cuda_embed (cuda_embed.cu)
# and cuda_kv_blocks_init (cuda_kv_blocks.cu).
INDEX_HEADERS = {
    "cuda/cuda_kernels.h": "cuda/cuda_*.cu",
}

# Headers still to be renamed: reported as TAP SKIPs until removed from this list.
# Empty now; the test says when a listed header has become clean.
TODO = []

# Words that can stand before "(" at top level without naming a function.
NOT_NAMES = {
    "__attribute__", "__declspec", "__asm__", "asm", "_Alignas", "alignas",
    "_Static_assert", "static_assert", "sizeof", "_Alignof", "alignof", "typeof",
    "__typeof__", "_Generic", "_Atomic", "__extension__",
}
TYPE_WORDS = {
    "void", "char", "short", "int", "long", "float", "double", "signed", "unsigned",
    "_Bool", "bool", "const", "volatile", "restrict", "static", "inline", "extern",
    "struct", "union", "enum", "_Noreturn", "register", "__inline", "__inline__",
    "_Thread_local",
}

IDENT = re.compile(r"[A-Za-z_]\w*")


def strip_source(src):
    """The source without comments, string and character literals (each becomes a
    blank or an empty literal) and preprocessor lines; newlines are kept so that line
    numbers still hold."""
    out = []
    i, n = 0, len(src)
    at_line_start = True
    while i < n:
        c = src[i]
        if c == "/" and src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * src.count("\n", i, j))
            i = j
            continue
        if c == "/" and src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
            at_line_start = False
            continue
        if c == "#" and at_line_start:
            # A directive runs to the first newline not escaped by a backslash; the
            # comments inside it were already handled above only if they come first,
            # so scan it here, dropping everything but its newlines.
            j = i
            while j < n:
                if src.startswith("/*", j):
                    k = src.find("*/", j + 2)
                    k = n if k < 0 else k + 2
                    out.append("\n" * src.count("\n", j, k))
                    j = k
                    continue
                if src[j] == "\\" and j + 1 < n and src[j + 1] == "\n":
                    out.append("\n")
                    j += 2
                    continue
                if src[j] == "\n":
                    break
                j += 1
            i = j
            continue
        if c == "\n":
            at_line_start = True
        elif not c.isspace():
            at_line_start = False
        out.append(c)
        i += 1
    return "".join(out)


def top_level_declarations(text):
    """Split stripped source into top-level declarations: (line, text) with every
    {...} body replaced by "{}". `extern "C" {` opens no body (its contents are top
    level). A declaration ends at ";" or, for a function definition, after its body."""
    decls = []
    cur = []
    line = 1
    start_line = 1
    depth = 0            # brace depth inside a body being skipped
    paren = 0
    i, n = 0, len(text)
    extern_c = 0         # open extern "C" blocks
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        if depth:
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    cur.append("{}")
                    # A function definition ends with its body; a struct, union or
                    # enum body is followed by declarators and ";".
                    if re.search(r"\)\s*(?:__attribute__\s*\(\(.*\)\)\s*)?\{\}$",
                                 "".join(cur).strip(), re.S):
                        decls.append((start_line, "".join(cur).strip()))
                        cur = []
            i += 1
            continue
        if c == "(":
            paren += 1
        elif c == ")":
            paren = max(0, paren - 1)
        if c == "{" and paren == 0:
            sofar = "".join(cur).strip()
            if re.fullmatch(r'extern\s*""', sofar):
                extern_c += 1
                cur = []
            else:
                depth = 1
            i += 1
            continue
        if c == "}" and extern_c and not "".join(cur).strip():
            extern_c -= 1
            i += 1
            continue
        if c == ";" and paren == 0:
            decls.append((start_line, "".join(cur).strip()))
            cur = []
            i += 1
            continue
        if not cur or not "".join(cur).strip():
            start_line = line
        cur.append(c)
        i += 1
    if "".join(cur).strip():
        decls.append((start_line, "".join(cur).strip()))
    return decls


def drop_attributes(decl):
    """decl without __attribute__((...)) and __declspec(...) groups (balanced)."""
    out = decl
    while True:
        m = re.search(r"\b(__attribute__|__declspec|__asm__|asm)\s*\(", out)
        if not m:
            return out
        j = m.end() - 1
        d = 0
        while j < len(out):
            if out[j] == "(":
                d += 1
            elif out[j] == ")":
                d -= 1
                if d == 0:
                    break
            j += 1
        out = out[:m.start()] + " " + out[j + 1:]


def function_names(decl):
    """The functions one top-level declaration declares or defines ([] for a
    typedef, a variable, a function pointer or a macro invocation)."""
    decl = drop_attributes(decl)
    words = IDENT.findall(decl)
    if not words or words[0] == "typedef" or words[0] in NOT_NAMES:
        return []
    names = []
    # The declarators are split at top-level commas; only the text before an
    # initializer's "=" can declare a function.
    parts, d, start = [], 0, 0
    for j, c in enumerate(decl):
        if c in "([":
            d += 1
        elif c in ")]":
            d -= 1
        elif c == "," and d == 0:
            parts.append(decl[start:j])
            start = j + 1
    parts.append(decl[start:])
    for part in parts:
        part = re.split(r"(?<![=!<>])=(?!=)", part, 1)[0]
        name = declarator_function(part)
        if name:
            names.append(name)
    return names


def declarator_function(part):
    """The function name in one declarator (with the type in front for the first),
    or None."""
    k = part.find("(")
    if k < 0:
        return None
    before = part[:k].rstrip()
    m = re.search(r"([A-Za-z_]\w*)$", before)
    if m and m.group(1) not in TYPE_WORDS and m.group(1) not in NOT_NAMES:
        name = m.group(1)
        if name.isupper() and not before[:m.start()].strip():
            return None  # FOO(x); at top level: a macro invocation
        return name
    # "int (*name(args))(more)" declares a function returning a function pointer;
    # "int (*name)(args)" and "int (*name[4])(args)" are pointer variables.
    m = re.match(r"\(\s*\*\s*(?:const\s+)?([A-Za-z_]\w*)\s*\(", part[k:])
    if m:
        return m.group(1)
    return None


def module_of(path):
    stem = os.path.basename(path)[:-2]
    if stem.endswith("_impl"):
        stem = stem[:-len("_impl")]
    return stem


DEFINITION = re.compile(r'^extern\s+"C"[^(;]*?\b([a-z_]\w*)\s*\(', re.M)


def defining_stems(root, pattern):
    """{function: stem of the file whose extern "C" definition it is}."""
    import glob
    out = {}
    for f in sorted(glob.glob(os.path.join(root, pattern))):
        with open(f, encoding="utf-8", errors="replace") as fh:
            for m in DEFINITION.finditer(fh.read()):
                out[m.group(1)] = os.path.splitext(os.path.basename(f))[0]
    return out


def violations(path, root=None, rel=None):
    """[(line, name, prefix)] for the functions of header `path` outside their
    prefix: the header's stem, or for an index header the defining file's."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = strip_source(f.read())
    prefix = module_of(path)
    owners = None
    if root is not None and rel in INDEX_HEADERS:
        owners = defining_stems(root, INDEX_HEADERS[rel])
    bad = []
    for line, decl in top_level_declarations(text):
        for name in function_names(decl):
            want = prefix
            if owners is not None:
                # A launcher with no definition to name it after is a violation.
                want = owners.get(name, "<a stem of %s>" % INDEX_HEADERS[rel])
            if name != want and not name.startswith(want + "_"):
                bad.append((line, name, want))
    return bad


def headers(root):
    out = []
    for d in DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames.sort()
            for fn in sorted(filenames):
                if fn.endswith(".h"):
                    out.append(os.path.relpath(os.path.join(dirpath, fn), root))
    return sorted(p.replace(os.sep, "/") for p in out)


def fixture_expected(path):
    """The fixture's expected violations: "expect: name" lines of its comments."""
    with open(path, encoding="utf-8") as f:
        return sorted(re.findall(r"^\s*\*?\s*expect:\s*(\w+)", f.read(), re.M))


results = []


def tap(ok, name, detail=(), skip=None):
    results.append(ok)
    line = ("ok" if ok else "not ok") + f" {len(results)} - {name}"
    if skip:
        line += " # SKIP " + skip
    print(line)
    for d in detail:
        print("# " + d)
    sys.stdout.flush()


def main(argv):
    if len(argv) > 1 and argv[1] == "--check":
        bad = 0
        for p in argv[2:]:
            rel = os.path.relpath(os.path.abspath(p)).replace(os.sep, "/")
            for line, name, want in violations(p, ".", rel):
                print(f"{p}:{line}: {name} does not start with {want}_")
                bad += 1
        return 1 if bad else 0
    root = os.path.abspath(argv[1]) if len(argv) > 1 else os.path.dirname(
        os.path.dirname(HERE))

    fixture = os.path.join(HERE, "fixtures", "names_fixture.h")
    found = sorted(name for _, name, _ in violations(fixture))
    want = fixture_expected(fixture)
    tap(found == want and len(want) > 0, "the scanner catches the fixture's bad names",
        [f"expected {want}", f"found    {found}"] if found != want else ())

    all_headers = headers(root)
    if not all_headers:
        tap(False, f"no headers under {root}")
    todo_used, todo_dirty = set(), set()
    for h in all_headers:
        if h in EXCEPTIONS:
            tap(True, h, skip="exception: C-library-like helpers")
            continue
        bad = violations(os.path.join(root, h), root, h)
        todo = [t for t in TODO if fnmatch.fnmatch(h, t)]
        if todo:
            for t in todo:
                todo_used.add(t)
                if bad:
                    todo_dirty.add(t)
            tap(True, h, skip=f"TODO (names): {len(bad)} to rename" if bad else
                "TODO (names): clean")
            continue
        tap(not bad, h, [f"{h}:{line}: {name} does not start with {want}_"
                         for line, name, want in bad])
    for t in TODO:
        if t not in todo_used:
            print(f"# TODO entry {t} matches no header any more: remove it")
        elif t not in todo_dirty:
            print(f"# TODO entry {t}: its headers are clean now: remove it")
    print(f"1..{len(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
