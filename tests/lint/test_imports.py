#!/usr/bin/env python3
"""test_imports.py - the include graph keeps the layers of docs/architecture.md.

A module is a file stem (X.c with X.h; X_impl.h is X's own internal header). The
test fails, naming the files, when
  - two modules include each other, directly or around a longer circle, anywhere
    in engine/ server/ cli/ config/ bench/ cuda/;
  - a file includes a header of a layer above its own: engine/ includes nothing of
    server/, cli/, config/, bench/ or cuda/, nor libuv, llhttp or a CUDA header
    (the whole inference core builds and is tested without a network stack or a
    GPU); server/ and config/ include nothing of cli/ or bench/ (h2oserve links
    nothing from bench/); bench/ includes engine/ and server/'s job store
    (bench_claims), nothing else.

Usage: test_imports.py SOURCE_ROOT, or test_imports.py --self-test (the check
catches a circle and a layer break in a small made-up tree).
"""
import os
import re
import sys
import tempfile

DIRS = ["engine", "server", "cli", "config", "bench", "cuda"]
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^">]+)[">]', re.M)

# Which top folders each top folder may include from (besides its own).
MAY_INCLUDE = {
    "engine": set(),
    "cuda": {"engine"},
    "config": {"engine"},
    "server": {"engine", "config"},
    "bench": {"engine", "server"},
    "cli": {"engine", "config", "server"},
}
# System headers the engine must not see (DESIGN section 1).
ENGINE_FORBIDDEN_SYSTEM = re.compile(r"^(uv\.h|uv/|llhttp|cuda|cublas|nccl|curand)")


def sources(root):
    for d in DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for n in sorted(names):
                if n.endswith((".c", ".h", ".cu")):
                    yield os.path.join(dirpath, n)


def module_of(root, path):
    rel = os.path.relpath(path, root)
    stem = os.path.splitext(rel)[0]
    return re.sub(r"_impl$", "", stem)


def build_graph(root):
    """Module graph (edges with the file and line that make them) and layer breaks."""
    files = list(sources(root))
    headers = {}
    for f in files:
        if f.endswith(".h"):
            headers.setdefault(os.path.basename(f), []).append(f)
    graph, why, breaks = {}, {}, []
    for f in files:
        src = open(f, encoding="utf-8", errors="replace").read()
        mod = module_of(root, f)
        top = mod.split(os.sep)[0]
        graph.setdefault(mod, set())
        for m in INCLUDE.finditer(src):
            quote, name = m.group(1), m.group(2)
            line = src.count("\n", 0, m.start()) + 1
            where = "%s:%d" % (os.path.relpath(f, root), line)
            if quote == "<":
                if top == "engine" and ENGINE_FORBIDDEN_SYSTEM.match(name):
                    breaks.append("%s: the engine includes <%s>" % (where, name))
                continue
            for h in headers.get(os.path.basename(name), []):
                target = module_of(root, h)
                ttop = target.split(os.sep)[0]
                if ttop != top and ttop not in MAY_INCLUDE[top]:
                    breaks.append("%s: %s/ includes %s (a layer above it)"
                                  % (where, top, os.path.relpath(h, root)))
                if target != mod:
                    graph[mod].add(target)
                    why.setdefault((mod, target), where)
    return graph, why, breaks


def circles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check(root):
    graph, why, breaks = build_graph(root)
    problems = list(breaks)
    for comp in circles(graph):
        members = set(comp)
        edges = ["%s -> %s (%s)" % (a, b, why[(a, b)])
                 for a in comp for b in sorted(graph[a]) if b in members]
        problems.append("include circle among %s:\n    %s"
                        % (", ".join(comp), "\n    ".join(edges)))
    return problems, len(graph)


def self_test():
    """The check must catch what it is for, or its silence means nothing."""
    with tempfile.TemporaryDirectory() as d:
        def put(path, text):
            p = os.path.join(d, path)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        put("server/a.h", '#include "b.h"\n')
        put("server/b.c", '#include "b.h"\n#include "c.h"\n')
        put("server/b.h", "\n")
        put("server/c.h", '#include "a.h"\n')
        put("server/d_impl.h", '#include "d.h"\n')  # a module's own impl: no circle
        put("server/d.c", '#include "d_impl.h"\n')
        put("server/d.h", "\n")
        put("engine/e.c", '#include "a.h"\n#include <uv.h>\n#include <stdio.h>\n')
        problems, _ = check(d)
        circ = [p for p in problems if p.startswith("include circle")]
        assert len(circ) == 1 and "server/a, server/b, server/c" in circ[0], problems
        assert any("engine/e.c:1: engine/ includes server/a.h" in p for p in problems), problems
        assert any("engine/e.c:2: the engine includes <uv.h>" in p for p in problems), problems
        assert len(problems) == 3, problems
    print("ok - the check finds a circle of three, an engine file above its layer, and <uv.h>")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 2:
        print("usage: test_imports.py SOURCE_ROOT | --self-test", file=sys.stderr)
        return 2
    problems, n = check(sys.argv[1])
    for p in problems:
        print("FAIL " + p)
    if problems:
        return 1
    print("ok - %d modules, no include circle, every include within its layer" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
