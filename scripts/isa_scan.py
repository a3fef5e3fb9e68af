#!/usr/bin/env python3
"""Checks that linked binaries run no instruction beyond baseline x86-64 outside
the SIMD kernels that the dispatch (quant/cpu.h) enters only after checking the
CPU.

Usage: scripts/isa_scan.py BINARY...

Every instruction that needs more than x86-64's SSE2 (VEX or EVEX encoded:
AVX, AVX2, FMA, F16C, BMI1/2, AVX-512 and its mask ops; the legacy-encoded
0F38 / 0F3A opcode maps: SSSE3, SSE4.1/4.2, AES, SHA, MOVBE, CRC32, ADX; and
the SSE3, POPCNT, LZCNT, XSAVE... mnemonics below) is attributed, through the
symbol table, to the function it sits in. Such a function passes only if it is
a local (internal-linkage) function of an ISA unit, src/*/*_avx2.cpp or
*_avx512.cpp: those are the kernels, reachable only through their unit's
constant tables. Anything else fails the check: a registration function
compiled with ISA flags, or a header's inline function or std:: template that
an ISA unit instantiated with its flags and the linker kept for every caller
(such copies are weak, not local), or a default build compiled with
-march=native. Exit status 1 with one line per offending function.
"""
import bisect
import collections
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

ISA_UNIT = re.compile(r"_avx(2|512)\.cpp$")

# First opcode byte after the prefixes that may precede it: 0xC4 / 0xC5 (VEX)
# and 0x62 (EVEX) are always these encodings in 64-bit mode.
VEX_EVEX = r"((26|2e|36|3e|64|65|67) )*(c4|c5|62) "
# Legacy-encoded instructions of the three-byte opcode maps (SSSE3 and later).
MAP_0F38_0F3A = r"((26|2e|36|3e|64|65|66|67|f0|f2|f3|4[0-9a-f]) )*0f (38|3a) "
# The rest, by mnemonic: SSE3, POPCNT, LZCNT and friends. tzcnt is not here:
# GCC writes `rep bsf` (printed as tzcnt) for baseline code; CPUs without
# BMI1 run it as bsf, which gives the same result for the non-zero inputs it
# is used on.
MNEMONICS = (r"addsubp[sd]|hadd[a-z]*|hsub[a-z]*|lddqu|movddup|movshdup|movsldup|monitor|mwait|fisttp[a-z]*|"
             r"popcnt[a-z]*|lzcnt[a-z]*|rdrand|rdseed|xgetbv|xsave[a-z0-9]*|xrstor[a-z0-9]*|prefetchw[a-z0-9]*|"
             r"clflushopt|clwb|rdpid|movdir[a-z0-9]*|serialize|wbnoinvd")
CANDIDATE = re.compile(r"^ *([0-9a-f]+):\t(?:" + VEX_EVEX + "|" + MAP_0F38_0F3A + r"|[0-9a-f ]*\t(?:" + MNEMONICS +
                       r")\b)")

# (function, mnemonic) pairs outside the ISA units whose instruction is
# checked before it runs, mnemonic None for any; a function is its symbol or,
# for a local one, its source file.
ALLOWED = {
    # quant/cpu.cpp reads XCR0 only after CPUID says the OS enabled XSAVE
    # (OSXSAVE); its detect() is inlined into cpu_features().
    ("cpu.cpp", "xgetbv"),
    ("_ZN2ms12cpu_featuresEv", "xgetbv"),
    # tests/quant/half_test.cpp's hardware references, called only after
    # cpu_features() says F16C / AVX512-BF16.
    ("_ZN2ms12_GLOBAL__N_17hw_fp16Ef", None),
    ("_ZN2ms12_GLOBAL__N_17hw_bf16Ef", None),
}


def allowed(fn, mnemonic):
    return any((who, m) in ALLOWED for who in (fn[2], fn[4]) for m in (mnemonic, None))


def symbols(binary):
    """FUNC symbols sorted by address: (start, end, name, is_local, file)."""
    out = subprocess.run(["readelf", "-sW", binary], check=True, capture_output=True, text=True).stdout
    funcs, file, in_symtab = [], "", False
    for line in out.splitlines():
        if line.startswith("Symbol table"):
            in_symtab = "'.symtab'" in line  # .dynsym repeats some globals, without files
        f = line.split()
        if not in_symtab or len(f) < 8 or not f[0].endswith(":"):
            continue
        typ, bind = f[3], f[4]
        if typ == "FILE":
            file = f[7]
        elif typ == "FUNC" and f[6] != "UND":
            start, size = int(f[1], 16), int(f[2], 0)
            funcs.append((start, start + max(size, 1), f[7], bind == "LOCAL", file if bind == "LOCAL" else ""))
    funcs.sort()
    return funcs


def scan(binary):
    funcs = symbols(binary)
    starts = [f[0] for f in funcs]
    # grep -P (same pattern) passes on the few candidate lines of millions.
    objdump = subprocess.Popen(["objdump", "-d", "-w", "--insn-width=15", binary], stdout=subprocess.PIPE)
    dis = subprocess.Popen(["grep", "-P", CANDIDATE.pattern], stdin=objdump.stdout, stdout=subprocess.PIPE, text=True)
    objdump.stdout.close()
    found = collections.defaultdict(lambda: [0, ""])  # function -> [count, first instruction]
    kernel_insns = 0
    for line in dis.stdout:
        m = CANDIDATE.match(line)
        if not m:
            continue
        addr = int(m.group(1), 16)
        insn = line.rstrip().split("\t")[-1]
        i = bisect.bisect_right(starts, addr) - 1
        fn = funcs[i] if i >= 0 and addr < funcs[i][1] else None
        if fn and fn[3] and ISA_UNIT.search(fn[4]):
            kernel_insns += 1
            continue
        if fn and allowed(fn, insn.split()[0]):
            continue
        key = (fn[2], fn[4] or ("global" if not fn[3] else "?")) if fn else (f"<no symbol at {addr:#x}>", "")
        found[key][0] += 1
        if not found[key][1]:
            found[key][1] = insn
    if objdump.wait() != 0 or dis.wait() > 1:  # grep: 1 is no line found
        raise SystemExit(f"isa_scan: objdump failed on {binary}")
    return binary, kernel_insns, found


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def main(binaries):
    if not binaries:
        raise SystemExit(__doc__)
    bad = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        for binary, kernel_insns, found in pool.map(scan, binaries):
            names = demangle([k[0] for k in found])
            for (name, file), (count, first) in sorted(found.items()):
                print(f"isa_scan: {binary}: {names.get(name, name)} [{file}]: {count} instructions beyond "
                      f"x86-64 outside the dispatched kernels, first: {first}")
                bad += 1
            if kernel_insns == 0 and binary.endswith("/moestream"):
                print(f"isa_scan: {binary}: no kernel instructions found in the ISA units (is the scan broken?)")
                bad += 1
    print(f"isa_scan: {len(binaries)} binaries, {bad} offending functions")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
