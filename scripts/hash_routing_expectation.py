#!/usr/bin/env python3
"""What a token-id hash router gives on a text, computed without the model.

DeepSeek V4's first layers take the k experts a fixed table names for the
token id. For a table that draws k distinct experts of E uniformly per
token id, this prints, for the first N token ids read from standard input
(as `moestream tokenize --ids` prints them):
  iid      experts for 90 % of the picks when every token draws a fresh
           uniform set (each token id distinct): the balanced-table limit;
  table    the same with one uniform set per token id over the text's real
           ids (frequent tokens repeat their set, so fewer experts cover
           90 %), the mean of --trials random tables;
  reuse    the share of a token's experts the previous token also chose:
           p_rep + (1 - p_rep) * k / E, where p_rep is the share of
           consecutive token pairs with the same id (the table's Monte
           Carlo mean beside it).
"Experts for 90 %" counts as `bench routing` does: the fewest most-picked
experts whose picks reach 90 % of all picks.
usage: moestream tokenize -m M.gguf -f TEXT --ids | hash_routing_expectation.py [--k 6] [--experts 256] [--tokens 256]
"""
import argparse
import random
import sys


def cover(sets, E, share=0.9):
    uses = [0] * E
    for s in sets:
        for e in s:
            uses[e] += 1
    uses.sort(reverse=True)
    total, acc, n = sum(uses), 0, 0
    while n < E and acc < share * total:
        acc += uses[n]
        n += 1
    return n


def reuse(sets, k):
    pairs = [len(set(a) & set(b)) / k for a, b in zip(sets, sets[1:])]
    return sum(pairs) / len(pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--k', type=int, default=6)
    ap.add_argument('--experts', type=int, default=256)
    ap.add_argument('--tokens', type=int, default=256)
    ap.add_argument('--trials', type=int, default=200)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    ids = [int(x) for x in sys.stdin.read().split()][:a.tokens]
    rng = random.Random(a.seed)
    n, k, E = len(ids), a.k, a.experts
    iid = [cover([rng.sample(range(E), k) for _ in range(n)], E) for _ in range(a.trials)]
    tab_cover, tab_reuse = [], []
    for _ in range(a.trials):
        table = {}
        sets = [table.setdefault(t, rng.sample(range(E), k)) for t in ids]
        tab_cover.append(cover(sets, E))
        tab_reuse.append(reuse(sets, k))
    p_rep = sum(x == y for x, y in zip(ids, ids[1:])) / (n - 1)
    mean = lambda v: sum(v) / len(v)
    print(f'tokens {n}, distinct ids {len(set(ids))}, consecutive repeats {p_rep * 100:.1f} %, k {k} of {E}')
    print(f'experts for 90 %: iid uniform {mean(iid):.1f} (range {min(iid)}-{max(iid)}), '
          f'uniform table over these ids {mean(tab_cover):.1f} (range {min(tab_cover)}-{max(tab_cover)})')
    print(f'previous-token reuse: {(p_rep + (1 - p_rep) * k / E) * 100:.2f} % '
          f'(chance {k / E * 100:.2f} % + repeats); table Monte Carlo {mean(tab_reuse) * 100:.2f} %')


if __name__ == '__main__':
    main()
