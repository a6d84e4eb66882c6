#!/usr/bin/env python3
"""Code-health measurements of issue 36: production functions over a length, and import cycles
among a crate's modules.

usage: scripts/code-health.py [--max-lines 150] [--top 30]

A function's length is counted from its `fn` line to its closing brace (the line with the same
indentation), in `crates/*/src` outside `#[cfg(test)]` modules and `tests.rs` files. A crate's
module graph has an edge a -> b when a file of module a names `crate::b` (or `super::b` from a
top-level module); cycles are reported as strongly connected components of more than one module.
"""
import os
import re
import sys

FN = re.compile(r'^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+([A-Za-z0-9_]+)')


def production_files():
    for crate in sorted(os.listdir('crates')):
        src = os.path.join('crates', crate, 'src')
        for root, _, files in os.walk(src):
            for f in sorted(files):
                if f.endswith('.rs') and f != 'tests.rs':
                    yield crate, os.path.join(root, f)


def functions(path):
    lines = open(path, encoding='utf-8').read().split('\n')
    test_from = None
    for i, l in enumerate(lines):
        if l.strip() == '#[cfg(test)]' and i + 1 < len(lines) and lines[i + 1].lstrip().startswith('mod '):
            test_from = i
            break
    end = test_from if test_from is not None else len(lines)
    i = 0
    while i < end:
        m = FN.match(lines[i])
        if m and not lines[i].rstrip().endswith(';'):
            indent = m.group(1)
            j = i
            # the body ends at the first line after the header that is `indent}`
            while j < end and not (lines[j].startswith(indent + '}') and len(lines[j].rstrip()) == len(indent) + 1):
                if j > i and lines[j].rstrip() == indent + '}':
                    break
                j += 1
            if lines[i].rstrip().endswith('}') and '{' in lines[i]:
                j = i
            yield m.group(8), i + 1, j - i + 1
            i = j + 1
        else:
            i += 1


def module_of(crate_src, path):
    rel = os.path.relpath(path, crate_src)
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ('mod', 'lib', 'main'):
        parts = parts[:-1]
    return parts[0] if parts else ''


def cycles(crate):
    src = os.path.join('crates', crate, 'src')
    edges = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'):
                continue
            p = os.path.join(root, f)
            a = module_of(src, p)
            if not a:
                continue
            text = open(p, encoding='utf-8').read()
            cut = text.find('#[cfg(test)]\nmod ')
            if cut >= 0:
                text = text[:cut]
            text = re.sub(r'//[^\n]*', '', text)
            named = set(re.findall(r'\bcrate::([a-z_][a-z0-9_]*)', text))
            for group in re.findall(r'\bcrate::\{([^}]*)\}', text):
                named |= set(re.findall(r'(?:^|,)\s*([a-z_][a-z0-9_]*)', group))
            if os.path.dirname(p) == src:
                # In a top-level module `super::` is the crate root.
                named |= set(re.findall(r'\bsuper::([a-z_][a-z0-9_]*)', text))
                for group in re.findall(r'\bsuper::\{([^}]*)\}', text):
                    named |= set(re.findall(r'(?:^|,)\s*([a-z_][a-z0-9_]*)', group))
            for b in named:
                is_module = os.path.exists(os.path.join(src, b + '.rs')) or os.path.isdir(os.path.join(src, b))
                if b != a and is_module:
                    edges.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(edges) | {w for ws in edges.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def main():
    max_lines, top = 150, 30
    args = sys.argv[1:]
    if '--max-lines' in args:
        max_lines = int(args[args.index('--max-lines') + 1])
    if '--top' in args:
        top = int(args[args.index('--top') + 1])
    long = []
    total = 0
    for crate, path in production_files():
        for name, line, n in functions(path):
            total += 1
            if n > max_lines:
                long.append((n, f'{path}:{line}', name))
    long.sort(reverse=True)
    print(f'production functions: {total}; over {max_lines} lines: {len(long)}')
    for n, where, name in long[:top]:
        print(f'  {n:5}  {name}  {where}')
    print('import cycles among a crate\'s modules:')
    found = False
    for crate in sorted(os.listdir('crates')):
        if os.path.isdir(os.path.join('crates', crate, 'src')):
            for c in cycles(crate):
                found = True
                print(f'  {crate}: {" <-> ".join(c)}')
    if not found:
        print('  none')


if __name__ == '__main__':
    main()
