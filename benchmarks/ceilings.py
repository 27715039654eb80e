"""Measure the two ceilings of a GPU (METHOD.md): device-to-device copy bandwidth (bytes read +
written) and a bf16 GEMM rate through cuBLAS, on random data, median of timed repeats. Also the
bandwidth of other read:write mixes (read only, 2:1 as in swiglu or any binary elementwise op),
because HBM serves them at different rates than a copy and the floors use the copy rate.

    python benchmarks/ceilings.py        # on the GPU machine; prints one line per ceiling
"""

from __future__ import annotations

import statistics

import torch


def timed(fn, iters=20, warmup=3) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
    return statistics.median(out)


def main() -> None:
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.multi_processor_count} SMs, L2 {props.L2_cache_size / 2**20:.0f} MiB")
    n = 2 * 2**30  # 2 GiB source, far beyond L2
    src = torch.randn(n // 4, device="cuda")
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    print(f"copy: {2 * n / t / 1e12:.3f} TB/s (bytes read + written, {n / 2**30:.0f} GiB, median of 20)")
    # the same copy, each iteration preceded by an L2 flush: by writing (dirty L2) or reading (clean)
    flush = torch.ones(2 * props.L2_cache_size // 8, dtype=torch.int64, device="cuda")
    small = torch.randn(2**28 // 4, device="cuda")  # 256 MiB: what a benchmark case moves
    small_dst = torch.empty_like(small)
    for name, pre in (("none", lambda: None), ("write", lambda: flush.fill_(1)),
                      ("read", lambda: flush.sum())):
        ts = []
        for _ in range(30):
            pre()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            small_dst.copy_(small)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        t = statistics.median(ts)
        print(f"copy 256 MiB after flush={name}: {2 * 2**28 / t / 1e12:.3f} TB/s")
    # other read:write mixes, each far beyond L2: a read-only reduction, and 2 reads per write
    t = timed(lambda: src.sum())
    print(f"read only (sum): {n / t / 1e12:.3f} TB/s ({n / 2**30:.0f} GiB read, median of 20)")
    half = src[: src.numel() // 2]
    other, out = torch.randn_like(half), torch.empty_like(half)
    t = timed(lambda: torch.add(half, other, out=out))
    print(f"2 reads : 1 write (add): {3 * half.numel() * 4 / t / 1e12:.3f} TB/s "
          f"({3 * half.numel() * 4 / 2**30:.0f} GiB moved, median of 20)")
    del src, dst, flush, small, small_dst, half, other, out
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: a @ b, iters=10)
    print(f"bf16 gemm {m}^3: {2 * m**3 / t / 1e12:.0f} TFLOP/s (cuBLAS, random data, median of 10)")


if __name__ == "__main__":
    main()
