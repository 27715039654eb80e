"""The committed specs of the kernel library state the issue's goals (benchmark case, bandwidth
floor, speedup over torch.compile, no spills), cover the shapes and inputs users hit, and keep
their signatures; their oracles are well formed."""

from __future__ import annotations

import pytest

from regen.oracle import check_oracle
from support.library import DTYPES, ROOT, ROW_KERNELS, spec

H200_BANDWIDTH = 4.27e12  # measured copy bandwidth, targets/h200.yaml
# the issue's benchmark shape and dtype, floor (bytes that must move / H200_BANDWIDTH, to `rel`)
# and goal (fraction of that floor) on the H200
BENCH = {
    "softmax": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 2e-3, 0.85),
    "rmsnorm": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 2e-3, 0.90),
    "layernorm": ({"M": 32768, "N": 4096}, "bfloat16", 125.6e-6, 2e-3, 0.85),
    "swiglu": ({"M": 32768, "N": 4096}, "bfloat16", 188.4e-6, 2e-3, 0.95),
    "cross_entropy": ({"N": 8192, "V": 128256}, "bfloat16", 491.7e-6, 5e-3, 0.85),
    "rope": ({"B": 8, "S": 4096, "H": 32, "D": 128}, "bfloat16", 125.6e-6, 5e-3, 0.90),
    "maxpool3d": ({"N": 16, "C": 32, "D": 64, "H": 64, "W": 64}, "float32", 139.9e-6, 5e-3, 0.80),
}
# the bench case above is the spec's only one (softmax also times a long-row float32 case)
ONE_BENCH_CASE = {"swiglu", "rmsnorm", "layernorm", "cross_entropy", "rope", "maxpool3d"}
# no spills on NVIDIA for any kernel; the row kernels ask the same of AMD
MAX_SPILLS = {k: {"nvidia": 0, "amd": 0} if k in ROW_KERNELS else {"nvidia": 0} for k in BENCH}


@pytest.mark.parametrize("kernel", sorted(BENCH))
def test_spec_states_the_issue_goal_and_its_oracle_is_well_formed(kernel):
    s = spec(kernel)
    check_oracle(ROOT / "oracles" / f"{kernel}.py")
    shape, dtype, floor, rel, goal = BENCH[kernel]
    bench = [c for c in s.bench_cases() if c.sizes == shape and c.dtype == dtype]
    assert len(bench) == 1, f"the issue's bench case {shape} {dtype} is missing"
    if kernel in ONE_BENCH_CASE:
        assert s.bench_cases() == bench
    assert s.case_bytes(bench[0]) / H200_BANDWIDTH == pytest.approx(floor, rel=rel), \
        "bytes formula disagrees with the floor"
    assert s.profile.floor_fraction == {"h200": goal}
    # swiglu: torch.compile already runs at the HBM limit there; parity within 2 % (see the spec)
    assert s.profile.speedup == {"torch_compile": 0.98 if kernel == "swiglu" else 1.0}
    assert s.profile.max_spills == MAX_SPILLS[kernel]
    assert s.invariants and s.correctness_cases(), "every spec states invariants its oracle checks"
    dtypes = {c.dtype or s.signature.dtypes[0] for c in s.correctness_cases()}
    assert dtypes == set(DTYPES) == set(s.signature.dtypes), "every declared dtype has a correctness case"


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_row_kernel_cases_cover_the_tiny_the_unaligned_and_the_long_row(kernel):
    sizes = [c.sizes for c in spec(kernel).correctness_cases()]
    assert {"M": 1, "N": 1} in sizes, "the tiny case"
    assert any(s["N"] % 8 for s in sizes), "a row length that is not a multiple of the vector width"
    assert any(s["N"] > 60000 for s in sizes), "a row too long to keep on chip"


def test_signatures_are_the_contract():
    ce = spec("cross_entropy").signature
    assert ce.dtypes == ["bfloat16", "float16", "float32"]
    assert [(t.name, t.dtype) for t in ce.inputs] == [("logits", "T"), ("targets", "int64")]
    assert [(t.name, t.dtype, t.shape) for t in ce.outputs] == [("loss", "float32", [1])]
    assert spec("rope").signature.dtypes == ["bfloat16", "float16", "float32"]
    assert "float32" in spec("maxpool3d").signature.dtypes


def test_cases_cover_what_users_hit():
    ce = spec("cross_entropy").correctness_cases()
    assert {1000, 50257}.issubset({c.sizes["V"] for c in ce})
    assert {"large", "neg_inf_mask", "constant", "ignore"}.issubset({c.dist for c in ce})
    rope = spec("rope").correctness_cases()
    assert {64, 128}.issubset({c.sizes["D"] for c in rope})
    assert any(c.sizes["S"] % 2 for c in rope)
    assert any((c.sizes["D"] // 2) % 8 for c in rope), "a half-row that is not whole vectors"
    pool = spec("maxpool3d").correctness_cases()
    spatial = {c.sizes[k] for c in pool for k in "DHW"}
    assert {5, 7, 33}.issubset(spatial)
    assert any(c.sizes["W"] % 4 for c in pool) and any(c.sizes["W"] % 4 == 0 for c in pool)
