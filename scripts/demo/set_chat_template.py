#!/usr/bin/env python3
"""Sets tokenizer.chat_template in a GGUF file (adding or replacing it) from a
Jinja file, rewriting the header in place and keeping the tensor data as it
is (tensor offsets are relative to the data section). Used on the shipped
demo model with scripts/demo/chat_template.jinja; needs nothing but Python.

    python3 scripts/demo/set_chat_template.py MODEL.gguf TEMPLATE.jinja
"""
import os
import struct
import sys

KEY = "tokenizer.chat_template"
# GGUF value types -> fixed sizes (8: string, 9: array are read apart).
FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def read_string(b, at):
    n = struct.unpack_from("<Q", b, at)[0]
    return b[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n


def skip_value(b, at, kind):
    if kind in FIXED:
        return at + FIXED[kind]
    if kind == 8:
        return read_string(b, at)[1]
    if kind == 9:
        inner, n = struct.unpack_from("<IQ", b, at)
        at += 12
        for _ in range(n):
            at = skip_value(b, at, inner)
        return at
    raise ValueError(f"unknown GGUF value type {kind}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, template_path = sys.argv[1], sys.argv[2]
    with open(template_path, encoding="utf-8") as f:
        template = f.read()
    with open(path, "rb") as f:
        b = f.read()
    magic, version, n_tensors, n_kv = struct.unpack_from("<IIQQ", b, 0)
    if magic != 0x46554747 or version != 3:
        sys.exit(f"{path}: not a GGUF v3 file")
    at, kvs, alignment = 24, [], 32
    for _ in range(n_kv):
        start = at
        key, at = read_string(b, at)
        kind = struct.unpack_from("<I", b, at)[0]
        value_at = at + 4
        at = skip_value(b, value_at, kind)
        if key == "general.alignment":
            alignment = struct.unpack_from("<I", b, value_at)[0]
        if key != KEY:
            kvs.append(b[start:at])
    infos_start = at
    for _ in range(n_tensors):
        _, at = read_string(b, at)
        n_dims = struct.unpack_from("<I", b, at)[0]
        at += 4 + 8 * n_dims + 4 + 8
    infos = b[infos_start:at]
    data_start = at + (-at) % alignment
    enc = template.encode("utf-8")
    kvs.append(struct.pack("<Q", len(KEY)) + KEY.encode() + struct.pack("<IQ", 8, len(enc)) + enc)
    head = struct.pack("<IIQQ", magic, version, n_tensors, len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % alignment)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(head)
        f.write(b[data_start:])
    os.replace(tmp, path)
    print(f"{path}: {KEY} set ({len(enc)} bytes), {len(head)}-byte header")


if __name__ == "__main__":
    main()
