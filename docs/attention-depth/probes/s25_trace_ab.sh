#!/bin/bash
# A/B on the full qwen3-30b-a3b Q4_K_M synth, resident, depth 4096, 32 decode tokens
for r in 1 2; do for b in before after; do
uptime
/work/probe/ms-$b run -m /work/q30.gguf --mem 21G --random-prompt 4096 -c 4200 -n 32 --ignore-eos --temp 0 --draft off -t 2 --seed 3 --trace /tmp/tf-$b.json 2>/work/probe/full-$b-$r.err >/dev/null
grep -E "^decode" /work/probe/full-$b-$r.err
python3 -c "
import json,statistics
d=json.load(open('/tmp/tf-$b.json'));ev=d['traceEvents'] if isinstance(d,dict) else d
tok=sorted([e for e in ev if e.get('name')=='token'],key=lambda e:e['ts'])[-24:]
ec=sorted([e for e in ev if e.get('name')=='expert_compute'],key=lambda e:e['ts'])[-24*48:]
at=sorted([e for e in ev if e.get('name')=='attention'],key=lambda e:e['ts'])[-24*48:]
print('$b run $r: token median %.0f us, expert_compute median %.0f us/layer, attention %.0f us/layer' % (statistics.median(e['dur'] for e in tok), statistics.median(e['dur'] for e in ec), statistics.median(e['dur'] for e in at)))
"
done; done
