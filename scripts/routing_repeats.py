#!/usr/bin/env python3
"""Consecutive-token repetition of a routing trace in the Mixtral paper's terms.

Reads a trace written by `bench routing --save-trace` or `run --routing-trace`
(lines "token layer e0 e1 ...", best expert first) and prints, per layer and
per third of the layers, over pairs of consecutive tokens:
  first%  the first choice is the same expert (arXiv 2401.04088, Table 5,
          "first choice"; chance 1/n_expert);
  inter%  the two sets of experts share at least one ("first or second
          choice"; chance 46 % at 2 of 8);
  share%  the share of a token's experts the previous token also chose
          (bench routing's "prev %").
usage: routing_repeats.py TRACE
"""
import collections
import sys


def main(path):
    rows = collections.defaultdict(dict)
    for line in open(path):
        f = line.split()
        if not f or f[0].startswith('#'):
            continue
        rows[int(f[1])][int(f[0])] = [int(x) for x in f[2:] if int(x) >= 0]
    layers = sorted(rows)
    per = {}
    for l in layers:
        d = rows[l]
        first = inter = share = n = 0
        for t in sorted(d):
            if t + 1 not in d:
                continue
            p, c = d[t], d[t + 1]
            n += 1
            first += p[0] == c[0]
            common = len(set(p) & set(c))
            inter += common > 0
            share += common / len(c)
        per[l] = (100 * first / n, 100 * inter / n, 100 * share / n)
    print("layer first%  inter%  share%")
    for l in layers:
        print("%5d %6.1f %7.1f %7.1f" % ((l,) + per[l]))
    for i in range(3):
        sel = layers[i * len(layers) // 3:(i + 1) * len(layers) // 3]
        m = [sum(per[l][j] for l in sel) / len(sel) for j in range(3)]
        print("layers %d-%d: first %.1f  inter %.1f  share %.1f" % (sel[0], sel[-1], *m))


if __name__ == "__main__":
    main(sys.argv[1])
