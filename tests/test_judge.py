"""The judge (regen/judge/), child and parent side: load-time checks of host artifacts, the sealed
result, the guards around a launch (audit window, integrity, late writes), input perturbation in
the timed loop, the degenerate-oracle notes, a broken oracle, hidden cases, and the timed path of
in-place outputs and zeroed workspaces (which must not be falsely rejected)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from regen.build import Context, evaluate
from regen.compile import compile_source
from regen.project import Project
from regen.judge import Rejected, Settings, degenerate_oracle, hidden_variants
from regen.judge.channel import seal, unseal
from regen.judge.harness import Harness
from regen.judge.hostcode import native_problems
from regen.judge.watch import AuditWatch, LaunchWatch
from regen.spec import Case
from regen.store import Store

ROOT = Path(__file__).resolve().parent.parent
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or shutil.which("nm") is None,
                               reason="needs g++ and nm")


def honest_softmax():
    """The committed softmax@cpu: the control every guard must let through."""
    return Store(ROOT / "cache").current("softmax", "cpu")


def _so(tmp_path: Path, source: str, *flags: str) -> str:
    src, out = tmp_path / "k.cpp", tmp_path / "k.so"
    src.write_text(source)
    subprocess.run(["g++", "-O2", "-fPIC", "-shared", *flags, str(src), "-o", str(out)], check=True,
                   capture_output=True)
    return str(out)


# -- load-time checks of host artifacts -------------------------------------------------------------
@needs_gxx
def test_honest_softmax_may_be_loaded_and_uses_openmp(tmp_path):
    project = Project(ROOT)
    binary = compile_source(honest_softmax().source(), project.target("cpu")).result.binary
    path = tmp_path / "softmax.so"
    path.write_bytes(binary)
    problems, imports = native_problems(str(path))
    assert problems == []
    assert any(i.startswith("GOMP_") for i in imports)


@needs_gxx
@pytest.mark.parametrize("source,flags,expected", [
    ('extern "C" long k() { long r; asm volatile("syscall" : "=a"(r) : "a"(39)); return r; }', (),
     "raw system call"),
    ('extern "C" void k() {}', ("-Wl,-z,execstack",), "executable stack"),
    ('__attribute__((section(".wx,\\"awx\\",@progbits#"))) unsigned char c[16] = {0xc3};\n'
     'extern "C" void k() {}', (), "writable and executable"),
    ('#include <cstdio>\nextern "C" void k() { std::fopen("/tmp/x", "w"); }', (), "fopen"),
    ('extern "C" int PyRun_SimpleString(const char*);\n'
     'extern "C" void k() { PyRun_SimpleString("1"); }', (), "PyRun_SimpleString"),
    ('extern "C" int thrd_create(unsigned long*, int (*)(void*), void*);\n'
     'static int f(void*) { return 0; }\n'
     'extern "C" void k() { unsigned long t; thrd_create(&t, f, 0); }', (), "thrd_create"),
])
def test_host_artifacts_that_could_escape_are_not_loaded(tmp_path, source, flags, expected):
    problems, _ = native_problems(_so(tmp_path, source, *flags))
    assert any(expected in p for p in problems), problems


# -- the sealed result --------------------------------------------------------------------------------
def test_result_is_accepted_only_with_this_runs_key(tmp_path):
    key, body = b"k" * 32, json.dumps({"cases": [{"case": "c", "ok": True}], "fingerprint": {}})
    path = tmp_path / "result.json"
    path.write_text(seal(body, key))
    assert unseal(path, key)["cases"][0]["ok"] is True
    assert unseal(path, b"x" * 32)["kind"] == "result-integrity"
    sealed = json.loads(path.read_text())
    path.write_text(json.dumps({**sealed, "body": body.replace("true", "true ")}))
    assert unseal(path, key)["kind"] == "result-integrity"
    path.write_text(body)  # the pre-seal format: written by anything that can open the file
    assert unseal(path, key)["kind"] == "result-integrity"


def test_a_hang_is_killed_at_the_timeout(tmp_path):
    """A kernel that never returns: the child is killed and the reason names the timeout guard."""
    project = Project(ROOT)
    source = ('#include <cstdint>\nstatic volatile int never = 0;\n'
              'extern "C" void softmax_f32(const float*, float*, int64_t, int64_t) { while (!never) {} }\n'
              'extern "C" void softmax_bf16(const uint16_t*, uint16_t*, int64_t, int64_t) {}\n'
              'extern "C" void softmax_f16(const uint16_t*, uint16_t*, int64_t, int64_t) {}\n')
    recipe = "launches:\n  - kernel: softmax_{dtype}\n    args: [x, y, M, N]\n"
    ev = evaluate(
        Context(project=project, store=None), project.spec("softmax"), project.target("cpu"),
        source, recipe, verify_here=True, settings=Settings(timeout_s=45),
        cases=[Case.model_validate({"M": 2, "N": 3, "dtype": "float32"})])
    assert not ev.ok and "timed out" in ev.feedback and "[guard: timeout]" in ev.feedback


# -- the audit window ----------------------------------------------------------------------------
def test_python_run_during_a_launch_is_refused():
    watch = AuditWatch()
    with watch.window():
        sys.audit("ctypes.call_function", 0, ())  # regen's own launch: allowed
    with pytest.raises(Rejected) as err:
        with watch.window():
            exec("1 + 1")
    assert err.value.guard == "python-api" and "compile" in err.value.reason
    exec("1 + 1")  # outside a launch, Python is Python


class _InProcessRuntime:
    """A runtime whose artifact would share this process (as CUDA's does)."""

    device = "cpu"


def test_replacing_the_judges_functions_is_refused(monkeypatch):
    """An artifact in the judge's process could patch the clock or the comparison to forge times
    and results: every function of the child's judge modules must still be the one captured at
    load (the attack pyapi_import made on the old in-process worker)."""
    import time

    import regen.judge.compare
    import regen.judge.timing

    watch = LaunchWatch(_InProcessRuntime, host_code=False, omp_pool=0)
    watch.check_integrity()  # nothing replaced: nothing to say
    monkeypatch.setattr(regen.judge.compare, "compare", lambda *a, **k: None)
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    monkeypatch.setattr(regen.judge.timing.TimedLoop, "timed_sample", lambda *a: (1e-3, 1e-3, True))
    with pytest.raises(Rejected) as err:
        watch.check_integrity()
    assert err.value.guard == "harness-integrity"
    for name in ("compare.compare", "time.perf_counter", "timing.TimedLoop.timed_sample"):
        assert name in err.value.reason


LATE_WRITER = r"""
#include <pthread.h>
#include <unistd.h>
extern "C" {
static float* target;
static void* later(void*) { usleep(50000); target[0] = 42.0f; return nullptr; }
void write_later(float* y) { target = y; pthread_t t; pthread_create(&t, nullptr, later, nullptr); pthread_detach(t); }
}
"""


@needs_gxx
def test_a_late_write_rejects_the_case(tmp_path):
    """Work finished by a background thread after the call returned: the staged buffer changes
    after the reply, and the guard after the launch names it (before counting threads)."""
    import time
    from types import SimpleNamespace as NS

    import torch

    from regen.runtimes.cpu import Runtime

    so = _so(tmp_path, LATE_WRITER, "-pthread")
    watch = LaunchWatch(Runtime, host_code=True, omp_pool=0)
    runtime = Runtime(so)
    watch.loaded(runtime)
    y = torch.zeros(16)
    runtime.launch([NS(kernel="write_later", args=[NS(kind="tensor", value="y")])], {"y": y})
    time.sleep(0.2)
    with pytest.raises(Rejected) as err:
        watch.after_launch()
    assert err.value.guard == "late-writes" and "'y'" in err.value.reason
    runtime.close()


BROKEN_ORACLE = """\
import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(case.sizes["M"], case.sizes["N"], generator=g).to(case.dtype)}


def reference(inputs, case):
    return {"y": torch.softmax(inputs["x"].to(torch.float64), -1)[:, :1]}  # the wrong shape
"""


RAISING_ORACLE = BROKEN_ORACLE.replace(
    'return {"y": torch.softmax', 'assert inputs["x"].shape[1] == 8, "only N=8"\n    return {"y": torch.softmax')
UNIMPORTABLE_ORACLE = "import torch\nraise RuntimeError('no such table')\n" + BROKEN_ORACLE


@needs_gxx
@pytest.mark.parametrize("oracle, says", [
    (BROKEN_ORACLE, "oracle error"),
    (RAISING_ORACLE, "reference() raised AssertionError: only N=8"),
    (UNIMPORTABLE_ORACLE, "could not be imported: RuntimeError: no such table"),
], ids=["wrong-shape", "raises-in-reference", "raises-on-import"])
def test_an_oracle_that_breaks_its_contract_is_blamed(tmp_path, oracle, says):
    """A reference of the wrong shape, or an oracle that raises, fails the run as the oracle's
    fault (`[guard: oracle]`), never as the kernel's crash."""
    proj = tmp_path / "proj"
    (proj / "specs").mkdir(parents=True)
    (proj / "oracles").mkdir()
    shutil.copytree(ROOT / "targets", proj / "targets")
    shutil.copy(ROOT / "specs" / "softmax.yaml", proj / "specs" / "softmax.yaml")
    (proj / "oracles" / "softmax.py").write_text(oracle)
    project, entry = Project(proj), honest_softmax()
    ev = evaluate(
        Context(project=project, store=None), project.spec("softmax"), project.target("cpu"),
        entry.source(), entry.recipe(), verify_here=True, settings=Settings(seeds=1),
        cases=[Case.model_validate({"M": 3, "N": 7, "dtype": "float32"})])
    assert not ev.ok and says in ev.feedback and "[guard: oracle]" in ev.feedback, ev.feedback
    assert "[guard: crash]" not in ev.feedback


# -- the harness, without an artifact (lint mode) ----------------------------------------------------------
def _lint_harness():
    project = Project(ROOT)
    spec = project.spec("softmax")
    job = {"mode": "lint", "language": "cpp", "spec": spec.model_dump(mode="json"),
           "oracle": str(project.oracle_path("softmax")), "recipe": None}
    return Harness(job), spec


def test_perturbation_swaps_positions_with_the_donor_only():
    import torch

    h, spec = _lint_harness()
    case = Case.model_validate({"M": 64, "N": 4096, "dtype": "float32"})
    view = h.buffers.case_view(case)
    x, donor = h.buffers.make_inputs(case, view, 1), h.buffers.make_inputs(case, view, 2)
    before, donor_before = x["x"].clone(), donor["x"].clone()
    shadow = {"x": x["x"].clone()}
    h.buffers.perturb(x, shadow, donor)
    assert torch.equal(x["x"], shadow["x"])
    changed = (x["x"] != before).view(-1)
    assert 0 < int(changed.sum()) <= 64 * 4096 // 512
    # values moved, none invented: what left the set is in the donor at the same positions
    assert torch.equal(x["x"].view(-1)[changed], donor_before.view(-1)[changed])
    assert torch.equal(donor["x"].view(-1)[changed], before.view(-1)[changed])


def test_reference_notes_tell_constant_and_seed_independent_outputs():
    import torch

    h, spec = _lint_harness()
    normal = Case.model_validate({"M": 3, "N": 7, "dtype": "float32"})
    h.notes.note(normal, {"y": torch.softmax(torch.randn(3, 7, dtype=torch.float64), -1)})
    h.notes.note(normal, {"y": torch.softmax(torch.randn(3, 7, dtype=torch.float64), -1)})
    const = Case.model_validate({"M": 4, "N": 5, "dtype": "float32", "name": "c"})
    for _ in range(2):
        h.notes.note(const, {"y": torch.full((4, 5), 0.2, dtype=torch.float64)})
    notes = h.notes.notes
    assert notes["M3xN7:float32"]["seed_dependent"] is True
    assert notes["M3xN7:float32"]["constant"] is False
    assert notes["c"]["constant"] is True and notes["c"]["seed_dependent"] is False


def test_degenerate_oracle_needs_every_normal_case_degenerate():
    good = {"dist": "normal", "ref_constant": False, "seed_dependent": True}
    flat = {"dist": "normal", "ref_constant": True, "seed_dependent": False}
    fixed = {"dist": "normal", "ref_constant": False, "seed_dependent": False}
    special = {"dist": "constant", "ref_constant": True, "seed_dependent": False}
    assert degenerate_oracle([good, flat, special]) is None
    assert degenerate_oracle([flat, fixed, {**good, "dist": "large"}]) is not None
    assert degenerate_oracle([special]) is not None        # no normal case: all are considered
    assert degenerate_oracle([{"dist": "normal", "ref_constant": False, "seed_dependent": None}]) is None


# -- hidden cases -------------------------------------------------------------------------------------
def test_hidden_cases_keep_alignment_and_miss_every_listed_shape(monkeypatch):
    monkeypatch.delenv("REGEN_SECRET_SEED", raising=False)
    spec = Project(ROOT).spec("softmax")
    cases = spec.correctness_cases()
    hidden = hidden_variants(spec, cases, Settings())             # on by default, everywhere
    listed = {tuple(sorted(c.sizes.items())) for c in spec.cases}
    assert len(hidden) == len(cases)
    for orig, h in zip(cases, hidden):
        assert tuple(sorted(h.sizes.items())) not in listed
        assert h.dtype == orig.dtype and h.dist == orig.dist and not h.bench
        for k, v in orig.sizes.items():
            step = min(v & -v, 64)
            assert h.sizes[k] > v and h.sizes[k] % step == 0 and h.sizes[k] - v <= 3 * step
        assert h.name.startswith("hidden M")


def test_hidden_cases_follow_the_secret_and_hide_their_sizes(monkeypatch):
    spec = Project(ROOT).spec("softmax")
    cases = spec.correctness_cases()
    monkeypatch.setenv("REGEN_SECRET_SEED", "s1")
    a, b = hidden_variants(spec, cases, Settings()), hidden_variants(spec, cases, Settings())
    assert [c.sizes for c in a] == [c.sizes for c in b]
    assert all(c.name.startswith("hidden variant of ") for c in a)
    monkeypatch.setenv("REGEN_SECRET_SEED", "s2")
    assert [c.sizes for c in hidden_variants(spec, cases, Settings())] != [c.sizes for c in a]


# -- the timed path: no false rejection of in-place outputs or zeroed workspaces -------------------
INPLACE_SPEC = """\
name: scale_inplace
summary: y = 2 x, in place.
intent: Double every element of x in place.
signature:
  dtypes: [float32]
  inputs:
    - {name: x, dtype: T, shape: [N]}
  outputs:
    - {name: y, dtype: T, shape: [N], inplace_of: x}
cases:
  - {N: 1000}
  - {N: 4194304, bench: true}
tolerance:
  float32: {atol: 0.0, rtol: 0.0}
"""
INPLACE_ORACLE = """\
import torch


def make_inputs(case, seed):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(case.sizes["N"], generator=g).to(case.device)}


def reference(inputs, case):
    return {"y": inputs["x"].to(torch.float64) * 2}
"""
INPLACE_KERNEL = """\
#include <cstdint>
// Relies on what the recipe promises: `calls` is zeroed before every launch.
extern "C" void scale_f32(float* x, int64_t* calls, int64_t N) {
  if (calls[0]++ != 0) return;  // a dirty workspace would leave x as it was
  for (int64_t i = 0; i < N; ++i) x[i] *= 2.0f;
}
"""
INPLACE_RECIPE = """\
launches:
  - kernel: scale_{dtype}
    args: [x, calls, N]
workspace:
  - {name: calls, dtype: int64, shape: [1], zero: true}
"""


@needs_gxx
def test_timed_path_restores_inplace_inputs_and_rezeroes_workspaces(tmp_path):
    proj = tmp_path / "proj"
    (proj / "specs").mkdir(parents=True)
    (proj / "oracles").mkdir()
    shutil.copytree(ROOT / "targets", proj / "targets")
    (proj / "specs" / "scale_inplace.yaml").write_text(INPLACE_SPEC)
    (proj / "oracles" / "scale_inplace.py").write_text(INPLACE_ORACLE)
    project = Project(proj)
    ev = evaluate(
        Context(project=project, store=None), project.spec("scale_inplace"), project.target("cpu"),
        INPLACE_KERNEL, INPLACE_RECIPE, verify_here=True,
        settings=Settings(bench=True, baselines=(), iters=4, warmup=2))
    assert ev.ok, ev.feedback
    assert ev.outcome.bench and 4 <= ev.outcome.bench[0]["iters"] <= 6  # drawn per run


# -- shape coverage: benchmark cases checked, same-regime variants on the host ----------------------
def test_bench_cases_too_large_for_the_host_become_same_regime_variants():
    from regen.judge.parent import same_regime, tensor_bytes

    spec = Project(ROOT).spec("softmax")
    recipe = honest_softmax().recipe()
    big = spec.bench_cases()[1]                                    # 4096 x 32768 float32, 1 GiB
    small = Case.model_validate({"M": 768, "N": 4096, "dtype": "float32", "bench": True})
    assert same_regime(spec, recipe, small, 64 << 20, "s") is small  # fits: checked as it is
    seen = set()
    for salt in ("a", "b", "c", "d"):
        v = same_regime(spec, recipe, big, 64 << 20, salt)
        assert tensor_bytes(spec, v) <= 64 << 20 and not v.bench and v.dtype == big.dtype
        assert v.sizes["N"] == big.sizes["N"] and v.sizes["M"] % 64 == 0  # inner size, class kept
        assert "same-regime variant of M4096xN32768:float32" in v.name
        seen.add(v.sizes["M"])
    assert len(seen) > 1                                              # drawn, not fixed


def test_a_variant_must_take_the_same_when_branch():
    from regen.judge.parent import same_regime

    spec = Project(ROOT).spec("softmax")
    recipe = ("launches:\n  - kernel: big_{dtype}\n    when: \"M >= 1024\"\n    args: [x, y, M, N]\n"
              "  - kernel: small_{dtype}\n    when: \"M < 1024\"\n    args: [x, y, M, N]\n")
    big = spec.bench_cases()[1]
    v = same_regime(spec, recipe, big, 64 << 20, "s")
    assert v.sizes["M"] >= 1024 or v is big                         # never the other branch


# -- indistinguishable: fills, offsets ---------------------------------------------------------------
def test_a_correct_output_equal_to_a_fill_is_never_refused():
    """No fixed sentinel: an output that equals the run's fill (a prefix sum reaching 12288.0, a
    zero) is refused only where the fill is no correct value there."""
    import torch

    from regen.judge.compare import compare

    spec = Project(ROOT).spec("softmax")
    case = Case.model_validate({"M": 1, "N": 4, "dtype": "float32"})
    want = {"y": torch.tensor([[12288.0, 0.0, 1.0, 2.0]], dtype=torch.float64)}
    got = {"y": torch.tensor([[12288.0, 0.0, 1.0, 2.0]])}
    fill = {"y": torch.tensor([[12288.0, 0.0, 5.0, 5.0]])}
    assert compare(spec, case, got, want, fill).ok
    lazy = {"y": torch.tensor([[12288.0, 0.0, 1.0, 5.0]])}          # last element never written
    res = compare(spec, case, lazy, want, fill)
    assert not res.ok and res.guard == "poisoned-outputs"
    # both runs left their (different) fills at one element: unwritten, even where each fill
    # happened to be a correct value
    first_fill = {"y": torch.tensor([[7.0, 7.0, 7.0, 7.0]])}
    first_got = {"y": torch.tensor([[7.0, 0.0, 1.0, 2.0]])}
    second_fill = {"y": torch.tensor([[12288.0, 3.0, 3.0, 3.0]])}
    second_got = {"y": torch.tensor([[12288.0, 0.0, 1.0, 2.0]])}
    want2 = {"y": torch.tensor([[12288.0, 0.0, 1.0, 2.0]], dtype=torch.float64)}
    assert not compare(spec, case, first_got, want2, first_fill).ok          # 7 is wrong anyway
    res = compare(spec, case, second_got, want2, second_fill, earlier=(first_got, first_fill))
    assert not res.ok and res.guard == "poisoned-outputs"


def test_fills_are_drawn_per_run_and_never_shared_between_runs():
    import torch

    from regen.judge.buffers import FILL_KINDS
    from regen.judge.compare import bits_of

    h, spec = _lint_harness()
    b = h.buffers
    assert {b.draw_kind() for _ in range(200)} == set(FILL_KINDS)
    payloads = set()
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for _ in range(20):
            buf = b.fill(torch.empty(8, dtype=dtype), "nan")
            assert torch.isnan(buf).all()
            payloads.add(int(bits_of(buf)[0]))
        first = b.fill(torch.empty(4096, dtype=dtype), "noise")
        again = b.fill(torch.empty(4096, dtype=dtype), "noise", avoid=first)
        assert not (bits_of(first) == bits_of(again)).any()
        zeros = b.fill(torch.empty(64, dtype=dtype), "zeros")
        assert not (bits_of(b.fill(torch.empty(64, dtype=dtype), "zeros", avoid=zeros))
                    == bits_of(zeros)).any()
    assert len(payloads) > 30 and int(bits_of(torch.tensor([float("nan")]))[0]) not in payloads


def test_buffers_sit_at_random_offsets_with_the_promised_alignment():
    import torch

    from regen.judge.buffers import Buffers

    b = Buffers(Project(ROOT).spec("softmax"), None, None, "cpu")
    offsets = set()
    for _ in range(40):
        t = b.empty([3, 5], torch.float32)
        assert t.data_ptr() % 64 == 0 and t.is_contiguous() and list(t.shape) == [3, 5]
        offsets.add(t.data_ptr() % 4096)
    assert len(offsets) > 5
    x = b.place(torch.arange(10.0))
    assert torch.equal(x, torch.arange(10.0)) and x.data_ptr() % 64 == 0


def test_gpu_buffer_offsets_vary_but_keep_the_16_bytes_tma_needs():
    """A tensor map's base address must be 16-byte aligned: every GPU placement is a multiple of
    GPU_ALIGN (256, which 16 divides) past an aligned base, for every element size, and the offsets
    still vary from buffer to buffer (the placement logic on host memory with the GPU's rule)."""
    import torch

    from regen.judge.buffers import GPU_ALIGN, Buffers
    from regen.tensormap import GLOBAL_ALIGN

    assert GPU_ALIGN % GLOBAL_ALIGN == 0
    b = Buffers(Project(ROOT).spec("gemm_bf16"), None, None, "cpu")
    b.align = GPU_ALIGN
    for dtype in (torch.bfloat16, torch.float32, torch.uint8, torch.float64):
        offsets = set()
        for _ in range(40):
            t = b.empty([7, 9], dtype)
            assert t.data_ptr() % GPU_ALIGN == 0, dtype
            offsets.add(t.data_ptr() % 4096)
        assert len(offsets) > 5, dtype


def test_the_timed_schedule_is_drawn_per_run():
    h, spec = _lint_harness()
    plans = [h.timed.plan(3, 16, 2) for _ in range(20)]
    for warm, order, checked in plans:
        assert 16 <= len(order) <= 24 and 2 <= len(warm) <= 4
        assert len(checked) >= 2 and all(0 <= i < len(order) for i in checked)
        assert set(order) <= {0, 1, 2}
    assert len({(len(o), tuple(sorted(c))) for _, o, c in plans}) > 10


def test_the_child_removes_its_job_file(tmp_path):
    from regen.judge.child import _forget

    job = tmp_path / "job.json"
    job.write_text("{}")
    _forget(job)
    assert not job.exists()


def test_regen_trace_reports_each_seed_and_timed_implementation_as_it_goes(tmp_path):
    """REGEN_TRACE=1 lets a verification stopped by a budget show how far it got: the child prints
    a line per correctness seed with its phases and per timed case with each implementation."""
    from conftest import make_project, regen

    root = make_project(tmp_path / "proj", kernels=("softmax",))
    for part in ("softmax", "objects"):
        shutil.copytree(ROOT / "cache" / part, root / "cache" / part)
    case = ("--case", "M=64,N=256,dtype=float32")
    quiet = regen(root, "bench", "softmax", "-t", "cpu", *case)
    assert quiet.returncode == 0, quiet.stdout + quiet.stderr
    assert "[judge" not in quiet.stderr
    traced = regen(root, "bench", "softmax", "-t", "cpu", *case, env={"REGEN_TRACE": "1"})
    assert traced.returncode == 0, traced.stdout + traced.stderr
    lines = [line for line in traced.stderr.splitlines() if line.startswith("[judge")]
    assert any("softmax: artifact loaded" in line for line in lines), traced.stderr
    seeds = [line for line in lines if "] verify " in line]
    assert seeds and all(p in seeds[0] for p in ("inputs", "candidate", "reference", "compare",
                                                 "passed")), seeds
    timed = [line for line in lines if "] time " in line]
    assert timed and "candidate" in timed[0] and "torch_eager" in timed[0], timed


def test_outputs_compare_in_slices_with_the_counts_and_worst_element_of_the_whole(monkeypatch):
    """A benchmark-sized output is compared a slice at a time (bounded temporaries on the device);
    counts, the first unwritten element and the worst element are those of the whole output."""
    import torch

    import regen.judge.compare as cmp

    monkeypatch.setattr(cmp, "SLICE", 5)
    spec = Project(ROOT).spec("softmax")
    case = Case.model_validate({"M": 4, "N": 8, "dtype": "float32"})
    want = {"y": torch.linspace(0.1, 1.0, 32, dtype=torch.float64).view(4, 8)}
    got = {"y": want["y"].float().clone()}
    got["y"][1, 3] += 0.01          # slice 2
    got["y"][3, 6] += 0.5           # slice 6: the worst
    got["y"][0, 2] -= 0.02          # slice 0
    res = cmp.compare(spec, case, got, want)
    assert not res.ok and res.guard == "tolerance"
    assert "3 of 32 elements" in res.reason and "worst at (3, 6)" in res.reason, res.reason
    assert res.max_abs == pytest.approx(0.5, rel=1e-6)
    fill = {"y": torch.full((4, 8), 7.0)}
    lazy = {"y": want["y"].float().clone()}
    lazy["y"][2, 1:3] = 7.0           # flat 17, 18: slice 3
    lazy["y"][3, 7] = 7.0             # flat 31: slice 6
    res = cmp.compare(spec, case, lazy, want, fill)
    assert not res.ok and res.guard == "poisoned-outputs"
    assert "3 of 32 elements" in res.reason and "(2, 1)" in res.reason, res.reason
    nan = {"y": want["y"].float().clone()}
    nan["y"][2, 5] = float("nan")
    res = cmp.compare(spec, case, nan, want)
    assert not res.ok and "NaN mismatch at (2, 5)" in res.reason, res.reason
    # a slice size that would skip elements (an in-process artifact setting the global) is refused
    monkeypatch.setattr(cmp, "SLICE", -1)
    with pytest.raises(Rejected) as err:
        cmp.compare(spec, case, nan, want)
    assert err.value.guard == "harness-integrity"
