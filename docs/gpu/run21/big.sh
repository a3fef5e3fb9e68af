#!/bin/bash
# Twenty-first session: issue 33's larger-than-RAM target. qwen3-235b-a22b
# Q4_K_M cut to 28 layers (40 GiB), --mem 16G (RAM tier) and --gpu-mem 8G:
# more than both tiers, so misses come from the drive (io_uring O_DIRECT,
# not the page cache). bench ssd in the same call for the drive bound;
# auto (WLFU in both tiers since run20) against copy, then the CPU alone.
D=.gpuwork/h34
P=/tmp/r21/${NAME:-big}
rm -rf $P
STEPS=
source docs/gpu/call.sh
gpu_setup
rm -f /tmp/q30.gguf
df -h /tmp | tail -1
M=/tmp/q235.gguf
synth qwen3-235b-a22b $M --type Q4_K_M --layers 28; sync
echo "== bench ssd"
timeout 100 $BIN/moestream bench ssd -m $M --file /tmp/bench.dat --size 4G --patterns sequential,gguf_expert \
  --seconds 1 --remove --json $P/ssd.json > $P/ssd.txt 2>&1; echo "exit $?"; tail -6 $P/ssd.txt
PROMPT=$D/prompt.txt
head -c 600 bench/prompts/long.txt > $PROMPT
IO=uring NGEN=48 CTX=2048 MEM=16G run q235_auto_1 --gpu-mem 8G
IO=uring NGEN=48 CTX=2048 MEM=16G run q235_copy --gpu-mem 8G --gpu-ram-tier copy
IO=uring NGEN=48 CTX=2048 MEM=16G run q235_cpu --gpu off
IO=uring NGEN=48 CTX=2048 MEM=16G run q235_auto_2 --gpu-mem 8G
for f in $P/q235_*.json; do
  python3 -c "
import json
r = json.load(open('$f'))
ph = {p['phase']: p for p in r['phases']}
d = ph.get('decode', {})
t = r['decode']['tokens']
print('%-16s decode %6.2f tok/s, read a token %7.1f MB, drive %5.2f GB/s over decode' % ('$f'.split('/')[-1],
      r['decode']['tokens_per_second'], d.get('bytes_read', 0) / 1e6 / max(t, 1),
      d.get('bytes_read', 0) / 1e9 / max(d.get('seconds', 1e-9), 1e-9)))" || true
done
echo "end at $SECONDS s"
