"""regen/prompt.py: what a generator is shown, deterministic, with a cacheable static prefix."""

from __future__ import annotations

from pathlib import Path

import pytest

from regen.generators import Candidate
from regen.generators.parse import parse_answer
from regen.prompt import (REQUEST_MARKER, TEMPLATE_VERSION, build_prompt, fence,
                          make_request_factory, split_prompt, static_prefix)
from regen.spec import Spec, load_spec
from regen.target import Target, load_target

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def softmax():
    return load_spec(ROOT / "specs" / "softmax.yaml")


@pytest.fixture(scope="module")
def cpu():
    return load_target(ROOT / "targets" / "cpu.yaml")


def _gpu_target(**over) -> Target:
    data = {
        "name": "h200", "description": "NVIDIA H200 SXM", "vendor": "nvidia", "arch": "sm_90a",
        "language": "cuda", "toolchain": {"name": "nvrtc"},
        "limits": {"smem_per_block": 232448, "max_threads_per_block": 1024, "sm_count": 132},
        "features": ["wgmma", "tma", "bf16"],
        "taxonomy": [{"id": "cuda.warp_reduce", "technique": "Reduce with __shfl_xor_sync."}],
    }
    data.update(over)
    return Target.model_validate(data)


def test_softmax_cpu_prompt_carries_spec_and_target(softmax, cpu):
    text = build_prompt(softmax, cpu)
    assert softmax.intent.strip() in text
    assert "- x: T[M, N]" in text and "- y: T[M, N]" in text
    assert ", ".join(softmax.signature.dtypes) in text
    for inv in softmax.invariants:
        assert f"- {inv.name}: {inv.description.strip()}" in text
    for dtype, tol in softmax.tolerance.items():
        assert f"- {dtype}: atol {tol.atol:g}, rtol {tol.rtol:g}" in text
    # every case, edge shapes and distributions included, benchmark cases after their heading
    bench_at = text.index("Benchmark cases")
    for case in softmax.cases:
        line = (f"- {case.name + ': ' if case.name else ''}M={case.sizes['M']}, N={case.sizes['N']}, "
                f"dtype {case.dtype}" + (f", inputs {case.dist}" if case.dist != "normal" else ""))
        assert line in text, line
        assert (text.index(line) > bench_at) == case.bench
    assert "- single: M=1, N=1, dtype float32" in text
    assert f"Bytes that must move: {softmax.profile.bytes}" in text
    for baseline in softmax.profile.speedup:
        assert baseline in text
    # the nvidia-only expectations do not leak onto the host column
    assert "physical floor" not in text and "spills" not in text
    # the target's prompt view
    assert "## Target family `cpu`" in text and "Vendor host, language cpp, arch x86_64." in text
    assert "Limits: simd_bytes=16" in text and "Features: openmp, sse4.2" in text
    assert cpu.notes.strip() in text
    for cell in cpu.taxonomy:
        assert f"- {cell.id}: {cell.technique}" in text
    # the format contract for this language
    assert "```cpp" in text and "```yaml" in text and "`NOTE:`" in text
    assert "softmax_bf16, softmax_f16, softmax_f32" in text
    assert "bfloat16 (bf16): uint16_t" in text
    assert "grid`, `block`, `shared_mem` do not apply" in text
    assert text.rstrip().endswith("one NOTE: line.")


def test_a_family_prompt_shows_every_arch_and_asks_for_one_source(softmax):
    from regen.project import Project

    project = Project(ROOT)
    mi350 = project.target("mi350")
    text = build_prompt(softmax, mi350, view=project.generation_view(mi350))
    assert "## Target family `cdna`" in text and "archs gfx942, gfx950" in text
    assert "### Arch gfx942" in text and "### Arch gfx950" in text
    assert "`#if defined(__gfx950__)`" in text
    # members of one family are shown the same target part, whatever member asks
    mi300x = project.target("mi300x")
    other = build_prompt(softmax, mi300x, view=project.generation_view(mi300x))
    part = text[text.index("## Target family"):text.index("## Artifact format")]
    assert part in other


def test_prompt_is_deterministic_and_ignores_unordered_field_order(softmax):
    a = _gpu_target()
    b = _gpu_target(limits={"sm_count": 132, "max_threads_per_block": 1024, "smem_per_block": 232448},
                    features=["tma", "bf16", "wgmma"])
    assert build_prompt(softmax, a) == build_prompt(softmax, a)
    assert build_prompt(softmax, a) == build_prompt(softmax, b)
    assert TEMPLATE_VERSION


def test_gpu_target_gets_its_profile_expectations_and_launch_geometry(softmax):
    text = build_prompt(softmax, _gpu_target())
    assert "Reach at least 0.85 of the physical floor" in text   # floor_fraction {nvidia: 0.85}
    assert "At most 0 bytes of register spills." in text          # max_spills {nvidia: 0}
    assert "```cuda" in text and "NVRTC" in text and "__global__" in text
    assert "`grid`, `block`: 1 to 3 dimensions" in text
    assert "bfloat16 (bf16): __nv_bfloat16" in text
    assert "cuda.warp_reduce" in text and "Limits: max_threads_per_block=1024, sm_count=132" in text


def test_a_geomean_expectation_reaches_the_device_prompt_only(cpu):
    attention = load_spec(ROOT / "specs" / "attention.yaml")
    line = "Be at least 1x as fast as torch_eager in geometric mean over the benchmark cases."
    assert line in build_prompt(attention, _gpu_target())
    assert line not in build_prompt(attention, cpu)     # the host column is not held to it


def test_static_prefix_is_shared_by_every_request(softmax, cpu):
    prefix = static_prefix(softmax, cpu)
    prev = Candidate(source='extern "C" void softmax_f32() {}\n',
                     recipe="launches:\n  - kernel: softmax_{dtype}\n    args: [x, y, M, N]\n",
                     note="naive three-pass rows")
    prompts = [build_prompt(softmax, cpu),
               build_prompt(softmax, cpu, None, "repair", prev, "g++: error: 'm' was not declared"),
               build_prompt(softmax, cpu, None, "optimise", prev, "median 3.1 ms, floor 0.12")]
    statics = {split_prompt(p)[0] for p in prompts}
    assert len(statics) == 1
    static = statics.pop()
    assert static.startswith(prefix)
    for p in prompts:
        assert p.startswith(prefix)
        assert split_prompt(p)[1].startswith(REQUEST_MARKER)
    repair = split_prompt(prompts[1])[1]
    assert "# Request: repair" in repair
    assert "NOTE: naive three-pass rows" in repair
    assert "extern \"C\" void softmax_f32() {}" in repair
    assert "## Feedback\ng++: error: 'm' was not declared" in repair
    assert "# Request: optimise" in prompts[2] and "median 3.1 ms" in prompts[2]


def test_unparseable_previous_answer_is_shown_verbatim_inside_a_longer_fence(softmax, cpu):
    raw = "Sure!\n```cpp\nint main() {}\n```\n(no recipe)"
    prev = Candidate(source=raw, recipe="", note="")
    text = build_prompt(softmax, cpu, None, "repair", prev, "no ```yaml block")
    assert "could not be read as an artifact" in text
    assert "````text\n" + raw + "\n````" in text


def test_fence_is_longer_than_any_backtick_run():
    assert fence("a ``` b", "x") == "````x\na ``` b\n````"
    assert fence("plain", "yaml") == "```yaml\nplain\n```"


def test_components_and_params_and_inplace_are_rendered(cpu):
    spec = Spec.model_validate({
        "name": "rmsnorm_inplace", "summary": "RMSNorm in place.", "intent": "Normalise rows.",
        "signature": {"dtypes": ["float32"],
                      "inputs": [{"name": "x", "shape": ["M", "N"]},
                                 {"name": "w", "shape": ["N"], "description": "gain"}],
                      "outputs": [{"name": "y", "shape": ["M", "N"], "inplace_of": "x"}],
                      "params": [{"name": "eps", "type": "float", "default": 1e-6}]},
        "cases": [{"M": 2, "N": 8, "params": {"eps": 1e-5}}],
        "tolerance": {"float32": {"atol": 1e-6, "rtol": 1e-5}},
    })
    comps = [("reduce_sum", 'extern "C" void reduce_sum_f32() {}\n',
              "launches:\n  - kernel: reduce_sum_{dtype}\n    args: [x]\n")]
    text = build_prompt(spec, cpu, comps)
    assert "- w: T[N] — gain" in text
    assert "- y: T[M, N] (in place: the same buffer as input x" in text
    assert "- eps: float, default 1e-06" in text
    assert "- M=2, N=8, dtype float32, eps=1e-05" in text
    assert "Inputs must not be modified" not in text
    assert "### reduce_sum" in text and "reduce_sum_f32" in text
    assert '"float32:eps"' in text   # the example recipe types the float parameter


def test_example_recipe_in_the_contract_is_a_valid_answer(softmax, cpu):
    """The contract's own example, answered as the contract says, parses."""
    text = build_prompt(softmax, cpu)
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    answer = f"```cpp\nextern \"C\" void softmax_f32() {{}}\n```\n```yaml\n{example}```\nNOTE: x\n"
    source, recipe, note = parse_answer(answer, "cpp")
    assert "softmax_{dtype}" in recipe and note == "x"


def test_request_factory_builds_requests(softmax, cpu):
    factory = make_request_factory(softmax, cpu)
    req = factory("optimise", None, "faster please")
    assert (req.kernel, req.target, req.language, req.purpose) == ("softmax", "cpu", "cpp", "optimise")
    assert req.prompt == build_prompt(softmax, cpu, None, "optimise", None, "faster please")
    with pytest.raises(ValueError, match="unknown request purpose"):
        factory("polish", None, None)


def test_format_tensors_show_their_storage_buffers_and_the_layout_of_each_format(cpu):
    spec = load_spec(ROOT / "specs" / "mx_gemm.yaml")
    text = build_prompt(spec, cpu)
    assert "- a: uint8[M, K] (mxfp8_e4m3 element codes of the logical [M, K] tensor)" in text
    assert "- b_scale: uint8[N, K // 32] (mxfp4 E8M0 block scales of the logical [N, K] tensor)" \
        in text
    assert "element 2i in the low nibble and 2i+1 in the high nibble" in text  # mxfp4 packing
    assert "FP8 e4m3 (1 sign, 4 exponent, 3 mantissa bits, bias 7" in text
    assert "2^(s - 127), s = 255 is NaN" in text
    plain = build_prompt(load_spec(ROOT / "specs" / "softmax.yaml"), cpu)
    assert "Block-scaled formats" not in plain  # other prompts are unchanged
