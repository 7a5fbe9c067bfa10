#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""callcircles.py: the call circles between source files (make callcircles).

A file uses another when its object refers to a function the other defines (a call, or the
function's address taken): nm's undefined symbols of one object against the defined text
symbols of the others. A call circle is a strongly connected group of two or more files:
A uses B and B uses A, directly or through a chain. Each group is listed with the uses that
close it; the exit status is 1 when there is any (make test checks that there are none).

The functions the shim interposes (the names shim/libllgoheap.map exports, but its own
llgo_heap_* API) are the C library's to every other file and to the shim itself (its calls
of malloc or syscall reach the next definition through the interposition), so uses of those
names are no edges.

usage: callcircles.py [--quiet] MAPFILE OBJECT...
"""
import collections
import re
import subprocess
import sys


def interposed_names(mapfile):
    names = set()
    with open(mapfile) as f:
        for line in f:
            m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*);\s*$", line)
            if m and not m.group(1).startswith("llgo_heap_"):
                names.add(m.group(1))
    return names


def symbols(obj):
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True, text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) < 2:
            continue
        if f[1] in ("T", "W"):
            defined.add(f[0])
        elif f[1] == "U":
            undefined.add(f[0])
    return defined, undefined


def source_of(obj):
    # build*/obj/agent/server/conn.o -> agent/server/conn.c
    tail = obj.split("/obj/", 1)[-1]
    return tail[:-2] + ".c" if tail.endswith(".o") else tail


def circles(graph):
    """Tarjan's strongly connected components, iteratively; only groups of two or more."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            pushed = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    pushed = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if pushed:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                group = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    group.append(w)
                    if w == v:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return sorted(out)


def main(argv):
    quiet = "--quiet" in argv
    argv = [a for a in argv if a != "--quiet"]
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    libc = interposed_names(argv[0])
    objs = argv[1:]
    defs, undefs = {}, {}
    for o in objs:
        defs[o], undefs[o] = symbols(o)
    owner = {}
    for o in objs:
        for name in defs[o]:
            owner.setdefault(name, o)
    graph = {source_of(o): set() for o in objs}
    uses = collections.defaultdict(set)
    for o in objs:
        for name in undefs[o] - libc:
            t = owner.get(name)
            if t and t != o:
                graph[source_of(o)].add(source_of(t))
                uses[(source_of(o), source_of(t))].add(name)
    groups = circles(graph)
    for g in groups:
        print(f"call circle of {len(g)} files: {' '.join(g)}")
        if quiet:
            continue
        members = set(g)
        for a in g:
            for b in sorted(graph[a] & members):
                print(f"    {a} -> {b}: {' '.join(sorted(uses[(a, b)]))}")
    print(f"call circles: {len(groups)} ({len(objs)} objects)")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
