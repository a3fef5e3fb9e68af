#!/usr/bin/env python3
"""Writes the demo model trained by scripts/demo/train.py as a float32 GGUF v3
file, OUT_DIR/demo-F32.gguf; `moestream quantize` makes the Q8_0 and Q4_K
files from it. Needs numpy only.

    python3 scripts/demo/export_gguf.py TRAIN_OUT_DIR OUT_DIR
"""
import json
import os
import struct
import sys

import numpy as np

F32 = 0
ALIGN = 32


class Writer:
    def __init__(self):
        self.kv = []
        self.tensors = []

    def add(self, key, kind, value):
        self.kv.append((key, kind, value))

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def _value(self, kind, v):
        if kind == "u32":
            return struct.pack("<II", 4, v)
        if kind == "f32":
            return struct.pack("<If", 6, v)
        if kind == "bool":
            return struct.pack("<I?", 7, v)
        if kind == "str":
            return struct.pack("<I", 8) + self._str(v)
        if kind == "str[]":
            return struct.pack("<IIQ", 9, 8, len(v)) + b"".join(self._str(s) for s in v)
        if kind == "i32[]":
            return struct.pack("<IIQ", 9, 5, len(v)) + np.asarray(v, dtype="<i4").tobytes()
        raise ValueError(kind)

    def write(self, path):
        head = [struct.pack("<IIQQ", 0x46554747, 3, len(self.tensors), len(self.kv))]
        for key, kind, v in self.kv:
            head.append(self._str(key) + self._value(kind, v))
        offset, blobs = 0, []
        for name, shape, gtype, data in self.tensors:
            dims = list(reversed(shape))  # GGUF lists the innermost (contiguous) dimension first
            head.append(self._str(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims) +
                        struct.pack("<IQ", gtype, offset))
            pad = (-len(data)) % ALIGN
            blobs.append(data + b"\0" * pad)
            offset += len(data) + pad
        h = b"".join(head)
        with open(path, "wb") as f:
            f.write(h + b"\0" * ((-len(h)) % ALIGN))
            for b in blobs:
                f.write(b)


def export(ckpt, tok, cfg, path):
    w = Writer()
    a = "qwen3moe."
    w.add("general.architecture", "str", "qwen3moe")
    w.add("general.name", "str", "moestream-demo")
    w.add("general.description", "str", "moestream's demo MoE, trained by scripts/demo/train.py on State of the "
          "Union addresses and Moby-Dick (public-domain texts)")
    w.add("general.file_type", "u32", 0)
    w.add(a + "block_count", "u32", cfg["n_layer"])
    w.add(a + "context_length", "u32", cfg["ctx"])
    w.add(a + "embedding_length", "u32", cfg["n_embd"])
    w.add(a + "feed_forward_length", "u32", cfg["n_ff_exp"])
    w.add(a + "attention.head_count", "u32", cfg["n_head"])
    w.add(a + "attention.head_count_kv", "u32", cfg["n_head_kv"])
    w.add(a + "attention.key_length", "u32", cfg["head_dim"])
    w.add(a + "attention.value_length", "u32", cfg["head_dim"])
    w.add(a + "rope.freq_base", "f32", cfg["rope_theta"])
    w.add(a + "attention.layer_norm_rms_epsilon", "f32", cfg["eps"])
    w.add(a + "expert_count", "u32", cfg["n_expert"])
    w.add(a + "expert_used_count", "u32", cfg["n_expert_used"])
    w.add(a + "expert_feed_forward_length", "u32", cfg["n_ff_exp"])
    w.add("tokenizer.ggml.model", "str", "gpt2")
    w.add("tokenizer.ggml.pre", "str", tok["pre"])
    w.add("tokenizer.ggml.tokens", "str[]", tok["tokens"])
    w.add("tokenizer.ggml.token_type", "i32[]", [3 if i == tok["eos"] else 1 for i in range(len(tok["tokens"]))])
    w.add("tokenizer.ggml.merges", "str[]", tok["merges"])
    w.add("tokenizer.ggml.bos_token_id", "u32", tok["eos"])
    w.add("tokenizer.ggml.eos_token_id", "u32", tok["eos"])
    w.add("tokenizer.ggml.add_bos_token", "bool", False)
    # A conversation as paragraphs (the model never saw roles): serve's chat.
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "chat_template.jinja"), encoding="utf-8") as f:
        w.add("tokenizer.chat_template", "str", f.read())
    order = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for i in range(cfg["n_layer"]):
        order += [f"blk.{i}.{n}.weight" for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                                  "attn_q_norm", "attn_k_norm", "ffn_norm", "ffn_gate_inp",
                                                  "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")]
    for name in order:
        x = np.ascontiguousarray(ckpt[name], dtype="<f4")
        w.tensors.append((name, x.shape, F32, x.tobytes()))
    w.write(path)
    print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    ckpt = np.load(os.path.join(src, "ckpt.npz"))
    with open(os.path.join(src, "tokenizer.json")) as f:
        tok = json.load(f)
    with open(os.path.join(src, "summary.json")) as f:
        cfg = json.load(f)["config"]
    export(ckpt, tok, cfg, os.path.join(dst, "demo-F32.gguf"))


if __name__ == "__main__":
    main()
