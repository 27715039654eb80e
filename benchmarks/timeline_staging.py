"""Where a decode-step timeline's time goes: each (layer, stage)'s first item on a block against
the block's later items of that stage, the stage-counter waits by the stage waited for, and how
long each layer's attention phase took.

The decode megakernels stage a stage's activation rows once per block, layer and stage, inside
the first item they take of it, so the first item's excess over the rest is what staging costs.
  usage: python benchmarks/timeline_staging.py TIMELINE.json[.gz]   (`regen profile --json`)
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else float("nan")


def main(path: str) -> int:
    raw = Path(path).read_bytes()
    data = json.loads(gzip.decompress(raw) if path.endswith(".gz") else raw)
    ops, events = data["ops"], data["events"]
    work = [i for i, name in enumerate(ops) if name not in ("wait", "weights")]
    sms = len({e[0] for e in events}) or 1
    by_block: dict[int, list] = defaultdict(list)
    for e in events:
        if e[2] in work:
            by_block[e[1]].append(e)
    first, rest = defaultdict(list), defaultdict(list)
    for evs in by_block.values():
        seen = set()
        for sm, block, op, step, start, end in sorted(evs, key=lambda e: e[4]):
            key = (op, step >> 16)   # step = (layer << 16) | item
            (rest if key in seen else first)[ops[op]].append((end - start) / 1e3)
            seen.add(key)
    print(f"{data.get('kernel', '?')} on {data.get('device', '?')}, {data.get('case', '')}: "
          f"span {data['summary']['span_us']:.0f} us, {sms} SMs")
    print(f"{'stage':8s} {'first items':>11s} {'median us':>9s} {'p90':>6s} {'us/SM':>6s} | "
          f"{'later':>6s} {'median':>6s} {'p90':>6s} {'us/SM':>6s} | staging us/SM")
    total = 0.0
    for name in (ops[i] for i in work):
        f, r = first[name], rest[name]
        excess = sum(f) / sms - len(f) / sms * quantile(r, 0.5) if r else 0.0
        total += excess
        print(f"{name:8s} {len(f):11d} {quantile(f, .5):9.2f} {quantile(f, .9):6.2f} "
              f"{sum(f) / sms:6.1f} | {len(r):6d} {quantile(r, .5):6.2f} {quantile(r, .9):6.2f} "
              f"{sum(r) / sms:6.1f} | {excess:6.1f}")
    waits = [e for e in events if ops[e[2]] == "wait"]
    print(f"staging (first items' excess over the later median): {total:.0f} us per SM; "
          f"stage-counter waits: {sum(e[5] - e[4] for e in waits) / 1e3 / sms:.0f} us per SM")
    # a wait's step is its counter: 5 per layer, one per stage (qkv, attn, o_proj, gate_up, down)
    stages = [n for n in ops if n not in ("wait", "weights", "lm_head")]
    for i, name in enumerate(stages):
        mine = [(e[5] - e[4]) / 1e3 for e in waits if e[3] % len(stages) == i]
        if mine:
            print(f"  waiting for every {name} item: {len(mine)} waits, {sum(mine) / sms:.1f} us "
                  f"per SM, mean {sum(mine) / len(mine):.2f} us")
    attention_phase(ops, events)
    return 0


def attention_phase(ops: list[str], events: list) -> None:
    """Per layer, from the last qkv item's end (when attention may start) to the last attention
    item's end (when o_proj may): a block holding two attention items makes a second wave."""
    if "qkv" not in ops or "attn" not in ops:
        return
    qkv, attn = ops.index("qkv"), ops.index("attn")
    ready: dict[int, int] = defaultdict(int)
    for e in events:
        if e[2] == qkv:
            ready[e[3] >> 16] = max(ready[e[3] >> 16], e[5])
    starts, ends, done = [], [], defaultdict(int)
    for e in events:
        if e[2] == attn:
            layer = e[3] >> 16
            starts.append((e[4] - ready[layer]) / 1e3)
            done[layer] = max(done[layer], e[5])
    ends = [(done[layer] - ready[layer]) / 1e3 for layer in done]
    if starts:
        print(f"attention phase per layer (last qkv end to last attention end): median "
              f"{quantile(ends, .5):.1f} us; items start {quantile(starts, .5):.1f} us after it "
              f"(p90 {quantile(starts, .9):.1f}, max {max(starts):.1f})")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1].strip())
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
