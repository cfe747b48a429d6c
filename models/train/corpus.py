#!/usr/bin/env python3
"""
corpus.py - the English text the default model learns from, out of Debian packages.

Reads the Linux kernel documentation (linux-doc: Documentation/**/*.rst.gz), the
Python documentation sources (python3.11-doc: html/_sources/**/*.rst.txt) and the
fortune cookies (fortunes, fortunes-min: /usr/share/games/fortunes), turns
reStructuredText into plain prose with a light hand, and writes

  OUT/train.txt    documents separated by the ASCII record separator (0x1e)
  OUT/heldout.txt  held-out prose, documents separated by a blank line
  OUT/corpus.json  what was read: files, bytes and documents per source

The split is by source file and deterministic: documentation files are ordered by the
SHA-1 of their path (relative to the package, so it does not depend on where the
package is installed) and taken into the held-out set, alternating between the two
documentation sources, until it holds --heldout-kb of text. Fortunes never go to the
held-out set: it measures documentation prose. A file is in exactly one of the two.

Usage: python3 corpus.py --out DIR [--heldout-kb 160] [--max-mb N]
corpus.sh installs the packages first and then runs this.
"""
import argparse
import gzip
import hashlib
import json
import os
import re
import sys

LINUX_DOC = "/usr/share/doc/linux-doc-6.1/Documentation"
PYTHON_DOC = "/usr/share/doc/python3.11/html/_sources"
FORTUNES = "/usr/share/games/fortunes"

RS = "\x1e"  # document separator in train.txt; removed from the text itself

# Directives whose body is code, tables, file lists or markup rather than prose.
SKIP_BODY = {
    "code-block", "code", "sourcecode", "literalinclude", "include", "toctree",
    "kernel-doc", "kernel-abi", "kernel-feat", "kernel-include", "doctest", "testcode",
    "testsetup", "testcleanup", "testoutput", "productionlist", "highlight", "csv-table",
    "list-table", "flat-table", "table", "tabularcolumns", "raw", "image", "figure",
    "index", "only", "ifconfig", "c:macro", "c:type", "c:struct", "c:member",
    "c:function", "c:var", "c:enum", "c:enumerator", "cssclass", "graphviz",
    "literal", "parsed-literal", "code-cell", "audit-event", "impl-detail",
    "availability", "opcode", "cmdoption", "option", "envvar", "program", "describe",
    "math", "rubric", "sectionauthor", "moduleauthor", "module", "currentmodule",
    "SPDX-License-Identifier", "contents", "seealso", "maintainers-include",
}

DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::")
UNDERLINE = re.compile(r"^\s*([=\-~^*+#`'\".:_])\1{2,}\s*$")
ROLE = re.compile(r":[\w:.+-]+:`(?:[^`<]*<)?~?([^`>]+?)>?`")
LINK = re.compile(r"`([^`<]+?)\s*<[^`>]*>`__?")
REF = re.compile(r"`([^`]+)`__?")
LITERAL = re.compile(r"``(.+?)``")
EMPH = re.compile(r"\*\*?([^*\s][^*]*?)\*\*?")
FOOTREF = re.compile(r"\s*\[[#*]?\w*\]_")
SUBST = re.compile(r"\|(\w[\w -]*)\|_?")


def indent_of(line):
    line = line.expandtabs(8)
    return len(line) - len(line.lstrip())


def code_like(line):
    """A line that reads as code, a table row or a path list rather than a sentence."""
    s = line.strip()
    if not s:
        return False
    if s[0] in "|+$#>{}" or s.startswith(("//", "/*", "-->")):
        return True  # table rows, shell prompts, C comments
    letters = sum(c.isalpha() or c == " " for c in s)
    symbols = sum(c in "{}[]();=<>/\\_@&%#$|" for c in s)
    return letters < 0.75 * len(s) or symbols > 0.08 * len(s) + 1


def rst_to_text(src):
    """Plain prose from reStructuredText: markup removed, code and tables dropped."""
    out = []
    skip_indent = None  # inside a block being dropped: lines indented deeper than this
    for raw in src.replace(RS, " ").replace("\t", "        ").split("\n"):
        line = raw.rstrip()
        ind = indent_of(line)
        if skip_indent is not None:
            if not line or ind > skip_indent:
                continue
            skip_indent = None
        m = DIRECTIVE.match(line)
        if m:
            name = m.group(2).split(":")[-1] if m.group(2).startswith("py:") else m.group(2)
            rest = line[m.end():].strip()
            if name in SKIP_BODY or name.startswith(("c:", "rst:", "kernel-")):
                skip_indent = ind
            elif rest and name in ("note", "warning", "attention", "important", "tip",
                                   "hint", "caution", "danger", "versionadded",
                                   "versionchanged", "deprecated"):
                out.append(" " * ind + rest)
            continue
        if line.lstrip().startswith(".."):
            # Comments, targets (.. _name:), substitutions and footnotes: their
            # indented continuation goes with them.
            skip_indent = ind
            continue
        if UNDERLINE.match(line):
            continue
        if ind > 0 and re.match(r"\s*:[\w -]+:(\s|$)", line):
            continue  # a directive's options (:maxdepth: 2)
        if line.endswith("::"):
            # A literal block follows; the paragraph ends with one colon.
            skip_indent = ind
            line = line[:-2].rstrip()
            if not line.strip():
                continue
            line += ":"
        if code_like(line):
            continue
        line = ROLE.sub(r"\1", line)
        line = LINK.sub(r"\1", line)
        line = LITERAL.sub(r"\1", line)
        line = REF.sub(r"\1", line)
        line = EMPH.sub(r"\1", line)
        line = FOOTREF.sub("", line)
        line = SUBST.sub(r"\1", line)
        out.append(line)
    return squeeze(out)


def squeeze(lines):
    """Lines joined, dedented to the least indent, runs of blank lines cut to one."""
    ind = min((indent_of(l) for l in lines if l.strip()), default=0)
    text, blank = [], True
    for l in lines:
        if not l.strip():
            if not blank:
                text.append("")
            blank = True
        else:
            text.append(l[ind:] if l[:ind].isspace() or not ind else l.lstrip())
            blank = False
    return "\n".join(text).strip() + "\n"


def decode(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def linux_files():
    for root, dirs, files in os.walk(LINUX_DOC):
        dirs[:] = sorted(d for d in dirs if d not in ("translations", "sphinx-static"))
        for f in sorted(files):
            if f.endswith(".rst.gz"):
                p = os.path.join(root, f)
                yield "linux-doc/" + os.path.relpath(p, LINUX_DOC), p


def python_files():
    for root, dirs, files in os.walk(PYTHON_DOC):
        dirs.sort()
        for f in sorted(files):
            if f.endswith(".rst.txt"):
                p = os.path.join(root, f)
                yield "python3.11-doc/" + os.path.relpath(p, PYTHON_DOC), p


def read_doc(path):
    with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
        return rst_to_text(decode(f.read()))


def fortune_docs():
    """Each fortune file is one document (for the split); its cookies are separated by
    blank lines. Overstriking (x BACKSPACE x) is printed once."""
    if not os.path.isdir(FORTUNES):
        return
    for f in sorted(os.listdir(FORTUNES)):
        p = os.path.join(FORTUNES, f)
        if "." in f or not os.path.isfile(p):
            continue
        with open(p, "rb") as fh:
            text = decode(fh.read())
        text = re.sub(".\b", "", text).replace(RS, " ")
        cookies = [c.strip("\n") for c in re.split(r"(?m)^%\s*$", text)]
        yield "fortunes/" + f, "\n\n".join(c for c in cookies if c.strip()) + "\n"


def sha(key):
    return hashlib.sha1(key.encode()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="build directory for the corpus")
    ap.add_argument("--heldout-kb", type=int, default=160,
                    help="size of the held-out prose in KB (default 160)")
    ap.add_argument("--max-mb", type=float, default=0,
                    help="stop reading the training text past this many MB (0: all; "
                         "the smoke run uses a slice)")
    a = ap.parse_args()

    sources = {"linux-doc": list(linux_files()), "python3.11-doc": list(python_files())}
    for name, files in sources.items():
        if not files:
            sys.exit(f"corpus.py: no {name} files found; run corpus.sh to install them")
        # Held-out candidates come first in SHA-1 order.
        files.sort(key=lambda kp: sha(kp[0]))

    os.makedirs(a.out, exist_ok=True)
    stats = {}
    heldout, held_bytes, held_keys = [], 0, []
    budget = a.heldout_kb * 1024
    # Alternate between the two documentation sources for the held-out set, taking
    # files that are prose-sized (a giant changelog would fill it alone).
    queues = {n: list(f) for n, f in sources.items()}
    taken = set()
    turn = 0
    names = list(queues)
    while held_bytes < budget and any(queues.values()):
        q = queues[names[turn % len(names)]]
        turn += 1
        while q:
            key, path = q.pop(0)
            text = read_doc(path)
            if 2000 <= len(text.encode()) <= 24000:
                heldout.append(text)
                held_bytes += len(text.encode()) + 1
                held_keys.append(key)
                taken.add(key)
                break
    max_bytes = a.max_mb * 1e6
    n_train = 0
    with open(os.path.join(a.out, "train.txt"), "w", encoding="utf-8") as out:
        def emit(src, key, text):
            nonlocal n_train
            s = stats.setdefault(src, {"files": 0, "bytes": 0})
            s["files"] += 1
            s["bytes"] += len(text.encode())
            out.write(text)
            out.write(RS)
            n_train += len(text.encode()) + 1

        # Interleave the sources so that a --max-mb slice samples all of them.
        def docs(n):
            return ((n, k, p) for k, p in sources[n] if k not in taken)

        iters = [docs(n) for n in names]
        iters.append(("fortunes", k, t) for k, t in fortune_docs())
        live = list(iters)
        while live and not (max_bytes and n_train >= max_bytes):
            for it in list(live):
                item = next(it, None)
                if item is None:
                    live.remove(it)
                    continue
                src, key, p = item
                text = p if src == "fortunes" else read_doc(p)
                if text.strip():
                    emit(src, key, text)
    with open(os.path.join(a.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(heldout))
    info = {"train": stats, "train_bytes": n_train,
            "heldout": {"files": held_keys, "bytes": held_bytes}}
    with open(os.path.join(a.out, "corpus.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"corpus: train {n_train / 1e6:.1f} MB "
          + ", ".join(f"{k} {v['files']} files {v['bytes'] / 1e6:.1f} MB"
                      for k, v in stats.items())
          + f"; held-out {held_bytes / 1024:.0f} KB from {len(held_keys)} files")


if __name__ == "__main__":
    main()
