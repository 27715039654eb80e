"""The committed launch recipes (cache/<kernel>/<target>, read through regen's Store) bind every
case of their spec, and the dispatch-boundary shapes around it, to launches the hardware can run:
one variant per case, names for the case's dtype, launchable blocks and grids, non-empty
workspaces; the multi-launch and overlapping-tile schemes cover what they must."""

from __future__ import annotations

import math

import pytest

from regen.recipe import workspace_shapes
from support.library import ROW_KERNELS, bound, edge_cases, kernels, kernels_on, spec, target

SHORT = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
ELEMENT_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def _cases(kernel):
    return [*spec(kernel).cases, *edge_cases(kernel)]


@pytest.mark.parametrize("kernel", kernels_on("h200"))
def test_cuda_recipe_launches_fit_the_hardware(kernel):
    limit = target("h200").limits["shared_memory_per_block"]
    for case in _cases(kernel):
        launches, recipe, env = bound(kernel, "h200", case)
        label = case.label(spec(kernel).signature.dtypes[0])
        for launch in launches:
            threads = math.prod(launch.block)
            assert threads % 32 == 0 and 32 <= threads <= 1024, f"{label}: block {launch.block}"
            assert 1 <= launch.grid[0] < 2**31 and all(1 <= g <= 65535 for g in launch.grid[1:]), \
                f"{label}: grid {launch.grid}"
            assert launch.shared_mem <= limit, f"{label}: {launch.kernel}: {launch.shared_mem} " \
                f"bytes of dynamic shared memory, the opt-in maximum is {limit}"
        for name, (_, shape, _) in workspace_shapes(recipe, env).items():
            assert all(d >= 1 for d in shape), f"{label}: workspace {name} {shape}"


@pytest.mark.parametrize("kernel", kernels_on("mi350"))
def test_hip_recipe_launches_fit_the_hardware(kernel):
    """CDNA workgroups are whole wavefronts (64 lanes), at most 1024 threads; dynamic LDS within
    the column's per-workgroup LDS (static __shared__ arrays are checked by the compile stage)."""
    limits = target("mi350").limits
    wave, lds = limits["wavefront_size"], limits["lds_per_workgroup"]
    for case in _cases(kernel):
        launches, recipe, env = bound(kernel, "mi350", case)
        label = case.label(spec(kernel).signature.dtypes[0])
        assert launches, f"{label}: no launch of the recipe applies"
        for launch in launches:
            threads = math.prod(launch.block)
            assert threads % wave == 0 and wave <= threads <= limits["max_threads_per_block"], \
                f"{label}: {launch.kernel}: block {launch.block} is not whole wavefronts"
            assert 1 <= launch.grid[0] < 2**31 and all(1 <= g <= 65535 for g in launch.grid[1:]), \
                f"{label}: grid {launch.grid}"
            assert launch.shared_mem <= lds, f"{label}: {launch.kernel}: {launch.shared_mem} " \
                f"bytes of dynamic LDS, the workgroup has {lds}"
        for name, (_, shape, _) in workspace_shapes(recipe, env).items():
            assert all(d >= 1 for d in shape), f"{label}: workspace {name} {shape}"


@pytest.mark.parametrize("kernel", [k for k in kernels_on("cpu") if spec(k).composition is None])
def test_cpu_recipe_makes_one_call_named_for_the_dtype(kernel):
    for case in _cases(kernel):
        launches, recipe, env = bound(kernel, "cpu", case)
        label = case.label(spec(kernel).signature.dtypes[0])
        assert len(launches) == 1, f"{label}: {[launch.kernel for launch in launches]}"
        assert launches[0].kernel.endswith("_" + SHORT[env["T"]]), f"{label}: {launches[0].kernel}"
        for name, (_, shape, _) in workspace_shapes(recipe, env).items():
            assert all(d >= 1 for d in shape), f"{label}: workspace {name} {shape}"


@pytest.mark.parametrize("kernel", ROW_KERNELS)
def test_row_kernel_cuda_recipe_picks_one_variant_per_case(kernel):
    """`when` guards never overlap (a split variant is a stats + apply pair); a variant is named
    for the dtype, runs one block row per grid, and is the 16-byte vector one exactly when rows
    are 16-byte aligned."""
    for case in _cases(kernel):
        launches, _, env = bound(kernel, "h200", case)
        label = case.label(spec(kernel).signature.dtypes[0])
        names = [launch.kernel for launch in launches]
        assert len(names) == 1 or (len(names) == 2 and "_split_stats_" in names[0]
                                   and names[1] == names[0].replace("_stats_", "_apply_")), \
            f"{label}: overlapping `when` guards select {names}"
        for launch in launches:
            assert launch.kernel.endswith("_" + SHORT[env["T"]])
            assert launch.grid[1:] == (1, 1), f"{label}: {launch.grid}"
            vec = env["N"] * ELEMENT_BYTES[env["T"]] % 16 == 0
            assert ("_vec_" in launch.kernel) == vec, f"{label}: {launch.kernel}"


def test_cross_entropy_recipe_reduces_in_a_second_launch():
    for case in spec("cross_entropy").cases:
        launches, recipe, env = bound("cross_entropy", "h200", case)
        assert [launch.kernel for launch in launches][-1] == "ce_mean_f32"
        assert len(launches) == 2
        assert workspace_shapes(recipe, env) == {"row_loss": ("float32", [case.sizes["N"]], False)}


def test_maxpool3d_recipe_covers_every_output_vector():
    """Blocks along W overlap by one vector; their stored vectors must tile [0, Q) exactly once."""
    for case in spec("maxpool3d").cases:
        (launch,), _, env = bound("maxpool3d", "h200", case)
        if "_vec_" not in launch.kernel:
            continue
        vec = 16 // ELEMENT_BYTES[env["T"]]
        q_count, tx = case.sizes["W"] // vec, launch.block[0]
        stored = []
        for z in range(launch.grid[2]):
            for x in range(tx):
                q = z * (tx - 1) + x
                if q < q_count and (x + 1 < tx or q == q_count - 1):
                    stored.append(q)
        assert sorted(stored) == list(range(q_count)), case
        assert 32 % tx == 0, "a row of lanes must not straddle warps"
        oh = (case.sizes["H"] - 3) // 2 + 1
        assert launch.grid[1] * launch.block[1] * 2 >= oh
        od = (case.sizes["D"] - 3) // 2 + 1
        odc = launch.args[-1].value
        volumes = case.sizes["N"] * case.sizes["C"]
        assert launch.grid[0] == volumes * -(-od // odc)


def _hidden_shapes(case, cap=81):
    """Every size the judge's hidden variant of `case` can take (regen/judge/parent.py
    hidden_variants: each size moved up by 1-3 times its largest power-of-two factor, capped at
    64), as whole cases; the 3**k combinations, or `cap` of them spread evenly when more."""
    import itertools

    steps = {k: min(v & -v, 64) for k, v in case.sizes.items() if v > 0}
    combos = list(itertools.product((1, 2, 3), repeat=len(steps)))
    combos = combos[:: max(1, len(combos) // cap)] + [(3,) * len(steps)]
    for r in combos:
        sizes = {k: case.sizes[k] + m * s for m, (k, s) in zip(r, steps.items())}
        yield case.model_validate({**case.model_dump(mode="json"), **sizes, "name": None})


# (kernel, target): why its recipe leaves hidden variants uncovered
KNOWN_UNCOVERED: dict[tuple[str, str], str] = {}
HIDDEN_VARIANT_TARGETS = ("h200", "mi350", "b200")   # the device columns whose recipes are committed


@pytest.mark.parametrize("kernel,target_name", [
    pytest.param(k, t, marks=pytest.mark.xfail(reason=KNOWN_UNCOVERED[k, t], strict=True))
    if (k, t) in KNOWN_UNCOVERED else (k, t)
    for t in HIDDEN_VARIANT_TARGETS for k in kernels_on(t)])
def test_every_hidden_variant_the_judge_can_draw_has_a_launch(kernel, target_name):
    """The judge checks a hidden variant of every correctness case whose sizes no one lists: a
    recipe whose `when`s leave such a shape uncovered fails on the hardware with 'no launch of
    the recipe applies'. Binding is cheap, so every variant the judge can draw is tried here, for
    every committed h200, mi350 and b200 recipe (mi300x shares mi350's cdna entry)."""
    s = spec(kernel)
    limits = target(target_name).limits
    # a launch must also fit the device: dynamic shared memory within the opt-in maximum (the
    # judge would launch it and fail there); mi300x's 64 KiB LDS bounds the shared cdna entry
    smem_cap = min(limits.get("shared_memory_per_block") or limits.get("lds_per_workgroup"),
                   target("mi300x").limits["lds_per_workgroup"] if target_name == "mi350"
                   else float("inf"))
    for case in s.correctness_cases():
        for hidden in _hidden_shapes(case):
            launches, _, _ = bound(kernel, target_name, hidden)
            where = (f"{hidden.label(s.signature.dtypes[0])} (a hidden variant of "
                     f"{case.label(s.signature.dtypes[0])})")
            assert launches, f"{kernel}@{target_name}: no launch applies to {where}"
            for launch in launches:
                assert launch.shared_mem <= smem_cap, \
                    f"{kernel}@{target_name}: {launch.kernel} asks {launch.shared_mem} bytes of " \
                    f"shared memory for {where}; the device gives {smem_cap}"
