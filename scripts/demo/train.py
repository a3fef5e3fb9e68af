#!/usr/bin/env python3
"""Trains moestream's demo model: a small qwen3moe (16 experts, top-2) with its
own byte-level BPE vocabulary, on the text scripts/demo/fetch_corpus.sh puts in
corpus/. Writes to OUT: ckpt.npz (float32 weights, names as in the GGUF),
tokenizer.json (tokens and merges), the held-out texts, and reference outputs
of this PyTorch model (prompt logits and greedy tokens in the golden files'
format, held-out perplexity) that moestream's must match.

    scripts/demo/fetch_corpus.sh
    python3 scripts/demo/train.py --out out/demo           # 2 min on one H200
    python3 scripts/demo/export_gguf.py out/demo models    # F32, Q8_0, Q4_K GGUFs
"""
import argparse
import collections
import glob
import json
import math
import os
import time

import numpy as np
import regex
import torch
import torch.nn as nn
import torch.nn.functional as F

# The GPT-2 pre-tokenizer, as moestream's "gpt-2" entry (src/tokenizer/tokenizer_pretok.cpp).
GPT2_SPLIT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"


def byte_chars():
    """GPT-2's byte -> printable character map (bytes that print stand for themselves)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, n = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + n)
            n += 1
    return chars


BYTE_CHARS = byte_chars()


def pieces(text):
    for w in GPT2_SPLIT.findall(text):
        yield "".join(BYTE_CHARS[b] for b in w.encode("utf-8"))


# ---------------------------------------------------------------- corpus

def load_corpus(root):
    """Documents split three ways, deterministically: every 25th address is
    held out for the reported perplexity, the one 12 after it validates (early
    stopping); Moby-Dick's last 5 % likewise (held out), the 5 % before it validates."""
    train, valid, test = [], [], []
    for i, path in enumerate(sorted(glob.glob(os.path.join(root, "sotu", "*.txt")))):
        with open(path, encoding="utf-8") as f:
            doc = f.read().strip()
        (test if i % 25 == 0 else valid if i % 25 == 12 else train).append(doc)
    with open(os.path.join(root, "moby-dick.txt"), encoding="utf-8") as f:
        moby = f.read().strip()
    a, b = moby.rfind("\n\n", 0, int(len(moby) * 0.90)), moby.rfind("\n\n", 0, int(len(moby) * 0.95))
    train.append(moby[:a].strip())
    valid.append(moby[a:b].strip())
    test.append(moby[b:].strip())
    return train, valid, test


# ---------------------------------------------------------------- BPE

def train_bpe(docs, n_vocab):
    """Byte-level BPE: 256 byte tokens, then merges of the most frequent
    adjacent pair within pre-tokenized words (ties: the larger pair), then EOT."""
    counts = collections.Counter()
    for d in docs:
        counts.update(pieces(d))
    words = [list(w) for w in counts]
    freq = list(counts.values())
    pair_n = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for p in zip(w, w[1:]):
            pair_n[p] += freq[i]
            where[p].add(i)
    merges = []
    n_merges = n_vocab - 256 - 1
    while len(merges) < n_merges and pair_n:
        best = max(pair_n.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for i in list(where[best]):
            w = words[i]
            for p in zip(w, w[1:]):
                pair_n[p] -= freq[i]
                if pair_n[p] <= 0:
                    del pair_n[p]
                where[p].discard(i)
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == best[0] and w[j + 1] == best[1]:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for p in zip(out, out[1:]):
                pair_n[p] += freq[i]
                where[p].add(i)
        where.pop(best, None)
    tokens = [BYTE_CHARS[b] for b in range(256)] + [a + b for a, b in merges] + [EOT]
    return tokens, [a + " " + b for a, b in merges]


class Bpe:
    def __init__(self, tokens, merges):
        self.ids = {t: i for i, t in enumerate(tokens)}
        self.rank = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        parts = list(w)
        while len(parts) > 1:
            ranked = [(self.rank.get(p, 1 << 30), k) for k, p in enumerate(zip(parts, parts[1:]))]
            r, k = min(ranked)
            if r == 1 << 30:
                break
            parts[k:k + 2] = [parts[k] + parts[k + 1]]
        ids = [self.ids[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pieces(text):
            out.extend(self.word(w))
        return out


# ---------------------------------------------------------------- model

class Cfg:
    n_vocab = 4096
    n_embd = 256
    n_layer = 4
    n_head = 4
    n_head_kv = 2
    head_dim = 64
    n_expert = 16
    n_expert_used = 2
    n_ff_exp = 192
    ctx = 512
    rope_theta = 10000.0
    eps = 1e-6


def rms_norm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def rope_neox(x, cos, sin):
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        D, E, FF = c.n_embd, c.n_expert, c.n_ff_exp
        self.attn_norm = nn.Parameter(torch.ones(D))
        self.attn_q = nn.Linear(D, c.n_head * c.head_dim, bias=False)
        self.attn_k = nn.Linear(D, c.n_head_kv * c.head_dim, bias=False)
        self.attn_v = nn.Linear(D, c.n_head_kv * c.head_dim, bias=False)
        self.attn_output = nn.Linear(c.n_head * c.head_dim, D, bias=False)
        self.attn_q_norm = nn.Parameter(torch.ones(c.head_dim))
        self.attn_k_norm = nn.Parameter(torch.ones(c.head_dim))
        self.ffn_norm = nn.Parameter(torch.ones(D))
        self.ffn_gate_inp = nn.Linear(D, E, bias=False)
        self.ffn_gate_exps = nn.Parameter(torch.randn(E, FF, D) * 0.02)
        self.ffn_up_exps = nn.Parameter(torch.randn(E, FF, D) * 0.02)
        self.ffn_down_exps = nn.Parameter(torch.randn(E, D, FF) * 0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, x, cos, sin, drop):
        c = self.c
        B, T, D = x.shape
        h = rms_norm(x, self.attn_norm, c.eps)
        q = self.attn_q(h).view(B, T, c.n_head, c.head_dim)
        k = self.attn_k(h).view(B, T, c.n_head_kv, c.head_dim)
        v = self.attn_v(h).view(B, T, c.n_head_kv, c.head_dim)
        q = rope_neox(rms_norm(q, self.attn_q_norm, c.eps), cos, sin).transpose(1, 2)
        k = rope_neox(rms_norm(k, self.attn_k_norm, c.eps), cos, sin).transpose(1, 2)
        v = v.transpose(1, 2)
        rep = c.n_head // c.n_head_kv
        k = k.repeat_interleave(rep, dim=1)  # query head h reads KV head h // rep
        v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
            s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            a = s.softmax(-1) @ v
        a = a.transpose(1, 2).reshape(B, T, c.n_head * c.head_dim)
        x = x + F.dropout(self.attn_output(a), drop, self.training)

        h = rms_norm(x, self.ffn_norm, c.eps).reshape(B * T, D)
        probs = self.ffn_gate_inp(h).float().softmax(-1)
        top_w, top_i = probs.topk(c.n_expert_used, dim=-1)
        top_w = top_w / top_w.sum(-1, keepdim=True)
        weight = torch.zeros_like(probs).scatter(1, top_i, top_w).to(h.dtype)
        # Every expert on every token, weighted 0 where not chosen: at this
        # size dense batched products are faster than gathering tokens.
        N, E, FF = h.shape[0], c.n_expert, c.n_ff_exp
        g = (h @ self.ffn_gate_exps.reshape(E * FF, D).t()).view(N, E, FF)
        u = (h @ self.ffn_up_exps.reshape(E * FF, D).t()).view(N, E, FF)
        act = (F.silu(g) * u * weight[:, :, None]).reshape(N, E * FF)
        y = act @ self.ffn_down_exps.transpose(1, 2).reshape(E * FF, D)
        x = x + F.dropout(y.view(B, T, D), drop, self.training)
        # Switch-Transformer balance: n_expert * sum_e (share of picks of e) * (mean prob of e).
        picks = torch.zeros_like(probs).scatter(1, top_i, 1.0).mean(0) / c.n_expert_used
        balance = c.n_expert * (picks * probs.mean(0)).sum()
        return x, balance, picks


class Moe(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.output_norm = nn.Parameter(torch.ones(c.n_embd))
        self.output = nn.Linear(c.n_embd, c.n_vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for b in self.blocks:
            nn.init.normal_(b.attn_output.weight, std=0.02 / math.sqrt(2 * c.n_layer))

    def forward(self, idx, drop=0.0):
        c = self.c
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device, dtype=torch.float32)
        inv = c.rope_theta ** (-torch.arange(0, c.head_dim, 2, device=idx.device, dtype=torch.float32) / c.head_dim)
        ang = pos[:, None] * inv[None, :]
        cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        x = F.dropout(self.token_embd(idx), drop, self.training)
        balance, picks = 0.0, []
        for b in self.blocks:
            x, bl, pk = b(x, cos, sin, drop)
            balance = balance + bl
            picks.append(pk)
        return self.output(rms_norm(x, self.output_norm, c.eps)), balance / c.n_layer, picks

    def gguf_tensors(self):
        """Weights under their GGUF names, float32, shaped [rows, cols] as PyTorch stores them."""
        t = {"token_embd.weight": self.token_embd.weight, "output_norm.weight": self.output_norm,
             "output.weight": self.output.weight}
        for i, b in enumerate(self.blocks):
            for n in ("attn_norm", "attn_q_norm", "attn_k_norm", "ffn_norm", "ffn_gate_exps", "ffn_up_exps",
                      "ffn_down_exps"):
                t[f"blk.{i}.{n}.weight"] = getattr(b, n)
            for n in ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp"):
                t[f"blk.{i}.{n}.weight"] = getattr(b, n).weight
        return {k: v.detach().float().cpu().numpy() for k, v in t.items()}


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def perplexity(model, ids, ctx, dev, max_windows=None):
    """Non-overlapping windows of ctx tokens; each window's tokens after its
    first are scored. The same definition as `moestream perplexity`."""
    nll, n = 0.0, 0
    starts = list(range(0, len(ids) - 1, ctx))
    if max_windows:
        starts = starts[:max_windows]
    for s in starts:
        w = torch.tensor(ids[s:s + ctx], device=dev)[None]
        if w.shape[1] < 2:
            continue
        logits = model(w)[0].float()
        nll += F.cross_entropy(logits[0, :-1], w[0, 1:], reduction="sum").item()
        n += w.shape[1] - 1
    return math.exp(nll / n), n


@torch.no_grad()
def write_reference(model, bpe, prompt, n_gen, prefix, dev):
    """Prompt logits and a greedy continuation in the golden files' format (tests/model/golden.h)."""
    ids = bpe.encode(prompt)
    seq = list(ids)
    logits = model(torch.tensor(seq, device=dev)[None])[0][0].float()
    prompt_logits = logits.cpu().numpy()
    gen_rows, greedy = [], []
    nxt = int(logits[-1].argmax())
    for _ in range(n_gen):
        greedy.append(nxt)
        seq.append(nxt)
        row = model(torch.tensor(seq, device=dev)[None])[0][0, -1].float()
        gen_rows.append(row.cpu().numpy())
        nxt = int(row.argmax())
    prompt_logits.astype("<f4").tofile(prefix + ".logits.f32")
    np.stack(gen_rows).astype("<f4").tofile(prefix + ".gen.f32")
    with open(prefix + ".json", "w") as f:
        json.dump({"arch": "qwen3moe", "prompt": prompt, "n_vocab": model.c.n_vocab, "prompt_tokens": ids,
                   "greedy_tokens": greedy}, f, indent=1)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="corpus")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=2500)
    ap.add_argument("--minutes", type=float, default=7.0, help="stop training after this long")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--balance", type=float, default=0.01, help="load-balancing loss weight")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--tiny", action="store_true", help="a minute-long CPU check of the whole script")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c = Cfg()
    t0 = time.time()

    train_docs, valid_docs, test_docs = load_corpus(args.corpus)
    if args.tiny:
        train_docs, valid_docs, test_docs = train_docs[:3], valid_docs[:1], test_docs[:1]
        train_docs[-1], test_docs[-1] = train_docs[-1][:20000], test_docs[-1][:3000]
        c.n_vocab, c.n_layer, c.ctx, c.n_embd, c.head_dim, c.n_expert, c.n_ff_exp = 300, 2, 32, 64, 16, 4, 32
    tokens, merges = train_bpe(train_docs, c.n_vocab)
    c.n_vocab = len(tokens)
    bpe = Bpe(tokens, merges)
    eot = len(tokens) - 1
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump({"tokens": tokens, "merges": merges, "eos": eot, "pre": "gpt-2"}, f)
    print(f"bpe: {len(merges)} merges in {time.time() - t0:.0f} s", flush=True)

    def encode_docs(docs):
        out = []
        for d in docs:
            out.extend(bpe.encode(d))
            out.append(eot)
        return out

    train_ids = torch.tensor(encode_docs(train_docs), dtype=torch.long)
    valid_ids = encode_docs(valid_docs)[:2000 if args.tiny else None]
    test_text = "\n\n".join(test_docs) + "\n"
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(test_text)
    sample = test_text[:test_text.rfind("\n", 0, 16000) + 1]
    with open(os.path.join(args.out, "heldout-sample.txt"), "w", encoding="utf-8") as f:
        f.write(sample)
    print(f"tokens: train {len(train_ids)}, valid {len(valid_ids)}, chars/token "
          f"{sum(map(len, train_docs)) / len(train_ids):.2f} ({time.time() - t0:.0f} s)", flush=True)

    model = Moe(c).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    active = n_params - c.n_layer * 3 * (c.n_expert - c.n_expert_used) * c.n_embd * c.n_ff_exp
    print(f"params {n_params / 1e6:.2f} M, active per token {active / 1e6:.2f} M", flush=True)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    steps = 3 if args.tiny else args.steps
    warm = max(1, steps // 20)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if dev == "cuda" else torch.autocast("cpu", enabled=False)
    best, best_state, log = float("inf"), None, []
    gen = torch.Generator().manual_seed(args.seed)
    for step in range(1, steps + 1):
        lr = args.lr * (step / warm if step <= warm else 0.1 + 0.45 * (1 + math.cos(math.pi * (step - warm) / (steps - warm))))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, len(train_ids) - c.ctx - 1, (args.batch,), generator=gen)
        batch = torch.stack([train_ids[s:s + c.ctx + 1] for s in starts.tolist()]).to(dev)
        model.train()
        with amp:
            logits, balance, picks = model(batch[:, :-1], args.dropout)
            loss = F.cross_entropy(logits.float().reshape(-1, c.n_vocab), batch[:, 1:].reshape(-1))
        (loss + args.balance * balance).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = step == steps or time.time() - t0 > args.minutes * 60
        if step % args.eval_every == 0 or last:
            model.eval()
            with amp:
                vppl, _ = perplexity(model, valid_ids, c.ctx, dev, max_windows=None if last else 64)
            spread = max(p.max().item() for p in picks) * c.n_expert
            rec = {"step": step, "s": round(time.time() - t0), "lr": lr, "loss": loss.item(),
                   "balance": balance.item(), "valid_ppl": vppl, "busiest_expert_x_fair": spread}
            log.append(rec)
            print(json.dumps(rec), flush=True)
            if vppl < best:
                best = vppl
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if last:
            break

    model.load_state_dict(best_state)
    model.eval()
    model.float()
    np.savez(os.path.join(args.out, "ckpt.npz"), **model.gguf_tensors())
    cfg = {k: getattr(c, k) for k in dir(c) if not k.startswith("_")}
    test_ids = bpe.encode(test_text)
    sample_ids = bpe.encode(sample)
    ppl, n = perplexity(model, test_ids, c.ctx, dev)
    ppl_sample, n_sample = perplexity(model, sample_ids, 128, dev)
    write_reference(model, bpe, "The Congress of the United States", 16, os.path.join(args.out, "reference"), dev)
    with torch.no_grad():
        prompt = bpe.encode("It is my duty to")
        seq = torch.tensor(prompt, device=dev)[None]
        for _ in range(40):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    ids = seq[0].tolist()
    text = b"".join(bytes([{v: k for k, v in BYTE_CHARS.items()}[ch] for ch in tokens[i]]) if i != eot else b"|"
                    for i in ids).decode("utf-8", "replace")
    summary = {"config": cfg, "params": n_params, "active_params": active, "train_tokens": len(train_ids),
               "heldout_ppl_ctx512": ppl, "heldout_tokens_scored": n, "sample_ppl_ctx128": ppl_sample,
               "sample_tokens_scored": n_sample, "best_valid_ppl": best, "greedy_sample": text,
               "minutes": (time.time() - t0) / 60, "log": log}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "log"}, indent=1))


if __name__ == "__main__":
    main()
