#!/bin/bash
# kbench_mma builds side by side (twenty-eighth session): carry a folder
# (D) whose kb.txz holds kbm-<variant> binaries; VARIANTS names them in
# the order run, ROUNDS rounds interleaved. Raw output in $OUT/kb.txz, and
# the best of the rounds per case and variant printed as one table.
D=${D:-.gpuwork/h30}
# Raw files go to /tmp/kbout and come back as one $OUT/kb.txz, packed at
# exit even when the call's limit cuts the run (a call returns only a few
# files: s28-kb lost seven of its fifteen to that count).
K=/tmp/kbout
rm -rf $K && mkdir -p /tmp/kb $K && tar xJf $D/kb.txz -C /tmp/kb
trap 'tar cJf $OUT/kb.txz -C $K .' EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
for r in $(seq 1 ${ROUNDS:-2}); do
  for v in $VARIANTS; do timeout 60 /tmp/kb/kbm-$v > $K/$v-$r.txt 2>&1 || echo "$v round $r: exit $?"; done
done
python3 - $K "$VARIANTS" <<'PY' | tee $K/table.txt
import re, sys, glob, os
d, vs = sys.argv[1], sys.argv[2].split()
rows = {}
for v in vs:
    for f in glob.glob(os.path.join(d, v + '-*.txt')):
        for line in open(f):
            m = re.match(r'(.*?):\s+([\d.]+) us', line)
            if m:
                k = re.sub(r'\(\d+ tiles\)', '', m.group(1)).strip()
                rows.setdefault(k, {}).setdefault(v, []).append(float(m.group(2)))
print('%-52s' % 'case (best us)' + ''.join('%8s' % v for v in vs))
for k, r in rows.items():
    print('%-52s' % re.sub(r'\s+', ' ', k)[:52] + ''.join('%8.1f' % min(r.get(v, [0])) for v in vs))
# kbench_mma's check against decode's kernel: the largest error a variant showed.
for v in vs:
    errs = [float(e) for f in glob.glob(os.path.join(d, v + '-*.txt')) for e in re.findall(r'err ([0-9.e+-]+|inf|nan)', open(f).read())]
    print('%-8s largest err against gpu::matmul: %s' % (v, max(errs) if errs else 'none printed'))
PY
