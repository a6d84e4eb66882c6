#!/usr/bin/env python3
"""BENCHMARKS.md's scoreboard: where Tern stands now, made from the benchmark runs' JSON.

usage: scripts/scoreboard.py [--check]

Reads every `bench/results/*.json` (a list of rows: workload, topology, unit, tern, peer_name,
peer, ratio, tern_cpu_us, peer_cpu_us, commit, date, machine, command), keeps the newest row of
each (workload, topology, peer), and writes the table between the scoreboard markers of
BENCHMARKS.md. `--check` fails (exit 1) when the file's table is not what the results make.
Benchmark scripts write such files: `RESULTS_JSON=bench/results/<date>-<name>.json
scripts/peer-redis-collections.sh ...`.
"""
import glob
import json
import sys

BEGIN = '<!-- scoreboard: made by scripts/scoreboard.py from bench/results/*.json; do not edit -->'
END = '<!-- end of scoreboard -->'


def num(x):
    if x is None:
        return '—'
    if isinstance(x, float) and not x.is_integer():
        return f'{x:,.2f}' if abs(x) < 100 else f'{x:,.0f}'
    return f'{int(x):,}'


def table():
    newest = {}
    for path in sorted(glob.glob('bench/results/*.json')):
        for r in json.load(open(path, encoding='utf-8')):
            k = (r['workload'], r['topology'], r['peer_name'])
            if k not in newest or r['date'] >= newest[k]['date']:
                newest[k] = r
    lines = [
        '| workload | topology | Tern | peer | ratio | CPU µs/op Tern / peer | commit, date | command |',
        '|---|---|---|---|---|---|---|---|',
    ]
    for k in sorted(newest, key=lambda k: (k[1], k[0], k[2])):
        r = newest[k]
        cpu = '—' if r.get('tern_cpu_us') is None else f"{r['tern_cpu_us']:.1f} / {r.get('peer_cpu_us') or 0:.1f}"
        lines.append(
            f"| {r['workload']} | {r['topology']} | {num(r['tern'])} | {r['peer_name']}: {num(r['peer'])} "
            f"| {r['ratio']:.2f} | {cpu} | {r['commit']}, {r['date']} | `{r['command']}` |"
        )
    return '\n'.join(lines)


def main():
    text = open('BENCHMARKS.md', encoding='utf-8').read()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        sys.exit('BENCHMARKS.md has no scoreboard markers')
    new = text[: i + len(BEGIN)] + '\n' + table() + '\n' + text[j:]
    if '--check' in sys.argv[1:]:
        if new != text:
            sys.exit('BENCHMARKS.md\'s scoreboard is stale: run scripts/scoreboard.py')
        return
    open('BENCHMARKS.md', 'w', encoding='utf-8').write(new)


if __name__ == '__main__':
    main()
