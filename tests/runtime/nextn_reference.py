#!/usr/bin/env python3
# Regenerates nextn_reference.json: the drafts glm4moe's NextN block gives on
# the golden glm4moe-F32 file, computed here in plain Python from the GGUF
# (no moestream code) by the formula of docs/speculation.md: for each
# position i of the golden prompt, x = eh_proj([enorm(embed(t[i+1])) |
# hnorm(h[i])]), h[i] the main layers' residual before the final norm,
# through the block's own layer (attention over rows 0..i, MoE), then
# output(shared_head_norm(.)) -> d1; depth 2 runs the block again on its
# own output and d1 at position i + 1 -> d2. The main layers follow
# ../shared/golden/README.md §glm4moe (their greedy token is checked against
# the golden file's). Run: python3 tests/runtime/nextn_reference.py
import json, math, os, struct

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "..", "..", "..", "shared", "golden", "models", "glm4moe-F32")

data = open(MODEL + ".gguf", "rb").read()
pos_ = 0


def rd(fmt):
    global pos_
    v = struct.unpack_from("<" + fmt, data, pos_)
    pos_ += struct.calcsize("<" + fmt)
    return v[0]


def rstr():
    global pos_
    n = rd("Q")
    s = data[pos_:pos_ + n].decode("utf-8", "replace")
    pos_ += n
    return s


SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


def rval(t):
    if t in SCALARS:
        return rd(SCALARS[t])
    if t == 8:
        return rstr()
    et, n = rd("I"), rd("Q")
    return [rval(et) for _ in range(n)]


assert data[:4] == b"GGUF"
pos_ = 8
n_tensors, n_kv = rd("Q"), rd("Q")
kv = {}
for _ in range(n_kv):
    k = rstr()
    kv[k] = rval(rd("I"))
info = {}
for _ in range(n_tensors):
    name = rstr()
    ne = [rd("Q") for _ in range(rd("I"))]
    typ, off = rd("I"), rd("Q")
    info[name] = (ne, typ, off)
align = kv.get("general.alignment", 32)
base = (pos_ + align - 1) // align * align
cache = {}


def w(name):
    if name not in cache:
        ne, typ, off = info[name]
        assert typ == 0, name + " is not F32"
        cache[name] = (list(struct.unpack_from("<%df" % math.prod(ne), data, base + off)), ne)
    return cache[name]


A = "glm4moe."
E, H, HKV = kv[A + "embedding_length"], kv[A + "attention.head_count"], kv[A + "attention.head_count_kv"]
D = kv.get(A + "attention.key_length", E // H)
eps, n_rot, theta = kv[A + "attention.layer_norm_rms_epsilon"], kv[A + "rope.dimension_count"], kv[A + "rope.freq_base"]
K, scale = kv[A + "expert_used_count"], kv.get(A + "expert_weights_scale", 1.0)
n_layer, n_nextn, n_dense = kv[A + "block_count"], kv[A + "nextn_predict_layers"], kv[A + "leading_dense_block_count"]


def mat(m, ne, x, start=0):  # y = W x, W of ne [in, out] (rows of `in` floats) from float `start`
    n_in, n_out = ne[0], ne[1]
    return [sum(m[start + o * n_in + i] * x[i] for i in range(n_in)) for o in range(n_out)]


def linear(name, x, bias=None):
    y = mat(*w(name), x)
    return [a + b for a, b in zip(y, w(bias)[0])] if bias else y


def expert(name, e, x):
    m, ne = w(name)
    return mat(m, ne, x, e * ne[0] * ne[1])


def rms(x, name):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    wt = w(name)[0]
    return [v * r * wt[i] for i, v in enumerate(x)]


def rope(v, p):  # NeoX pairs (j, j + n_rot/2) over the head's first n_rot dims
    v, half = v[:], n_rot // 2
    for j in range(half):
        a = p * theta ** (-2.0 * j / n_rot)
        c, s = math.cos(a), math.sin(a)
        v[j], v[j + half] = v[j] * c - v[j + half] * s, v[j] * s + v[j + half] * c
    return v


def silu(z):
    return z / (1 + math.exp(-z))


def swiglu(p, suffix, x, e=None):
    if e is None:
        g, u = linear(p + "ffn_gate" + suffix, x), linear(p + "ffn_up" + suffix, x)
        return linear(p + "ffn_down" + suffix, [silu(a) * b for a, b in zip(g, u)])
    g, u = expert(p + "ffn_gate_exps.weight", e, x), expert(p + "ffn_up_exps.weight", e, x)
    return expert(p + "ffn_down_exps.weight", e, [silu(a) * b for a, b in zip(g, u)])


def layer(il, xs):
    """Layer il over residual rows xs at positions 0, 1, ..."""
    p = "blk.%d." % il
    keys, vals, out = [], [], []
    for t, x in enumerate(xs):
        xn = rms(x, p + "attn_norm.weight")
        q = linear(p + "attn_q.weight", xn, p + "attn_q.bias")
        k = linear(p + "attn_k.weight", xn, p + "attn_k.bias")
        v = linear(p + "attn_v.weight", xn, p + "attn_v.bias")
        keys.append([rope(rms(k[h * D:(h + 1) * D], p + "attn_k_norm.weight"), t) for h in range(HKV)])
        vals.append([v[h * D:(h + 1) * D] for h in range(HKV)])
        att = []
        for h in range(H):
            qh, g = rope(rms(q[h * D:(h + 1) * D], p + "attn_q_norm.weight"), t), h // (H // HKV)
            sc = [sum(a * b for a, b in zip(qh, keys[s][g])) / math.sqrt(D) for s in range(t + 1)]
            mx = max(sc)
            ex = [math.exp(s - mx) for s in sc]
            att += [sum(ex[s] / sum(ex) * vals[s][g][d] for s in range(t + 1)) for d in range(D)]
        x = [a + b for a, b in zip(x, linear(p + "attn_output.weight", att))]
        xn = rms(x, p + "post_attention_norm.weight")
        if il < n_dense:
            y = swiglu(p, ".weight", xn)
        else:
            s = [1 / (1 + math.exp(-l)) for l in linear(p + "ffn_gate_inp.weight", xn)]
            bias = w(p + "exp_probs_b.bias")[0]
            chosen = sorted(range(len(s)), key=lambda e: -(s[e] + bias[e]))[:K]
            y = swiglu(p, "_shexp.weight", xn)
            for e in chosen:
                wt = s[e] / sum(s[c] for c in chosen) * scale
                y = [a + wt * b for a, b in zip(y, swiglu(p, "", xn, e))]
        out.append([a + b for a, b in zip(x, y)])
    return out


def head(x, norm):
    lg = linear("output.weight", rms(x, norm))
    best = max(range(len(lg)), key=lambda i: lg[i])
    gap = lg[best] - max(v for i, v in enumerate(lg) if i != best)
    return best, gap


meta = json.load(open(MODEL + ".json"))
toks = meta["prompt_tokens"]
emb = w("token_embd.weight")[0]
hs = [emb[t * E:(t + 1) * E] for t in toks]
for il in range(n_layer - n_nextn):
    hs = layer(il, hs)
assert head(hs[-1], "output_norm.weight")[0] == meta["greedy_tokens"][0], "main layers disagree with the golden file"

L = n_layer - n_nextn
p = "blk.%d.nextn." % L


def block_input(token, h):
    e = rms(emb[token * E:(token + 1) * E], p + "enorm.weight")
    return linear(p + "eh_proj.weight", e + rms(h, p + "hnorm.weight"))


rows = [block_input(toks[i + 1], hs[i]) for i in range(len(toks) - 1)]
out = []
for i in range(len(rows)):
    o = layer(L, rows[:i + 1])[-1]
    d1, gap1 = head(o, p + "shared_head_norm.weight")
    o2 = layer(L, rows[:i + 1] + [block_input(d1, o)])[-1]
    d2, gap2 = head(o2, p + "shared_head_norm.weight")
    out.append({"position": i, "next_token": toks[i + 1], "d1": d1, "d1_gap": gap1, "d2": d2, "d2_gap": gap2})
json.dump({"model": "glm4moe-F32", "drafts": out}, open(os.path.join(HERE, "nextn_reference.json"), "w"), indent=1)
print("wrote %d positions" % len(out))
