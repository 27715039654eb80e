"""Measure the two ceilings of a GPU (METHOD.md): device-to-device copy bandwidth (bytes read +
written) and a bf16 GEMM rate through cuBLAS, on random data, median of timed repeats.

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
    del src, dst
    m = 8192
    a = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(m, m, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: a @ b, iters=10)
    print(f"bf16 gemm {m}^3: {2 * m**3 / t / 1e12:.0f} TFLOP/s (cuBLAS, random data, median of 10)")


if __name__ == "__main__":
    main()
