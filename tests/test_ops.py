"""regen.ops: every spec as a torch custom op that runs the verified artifact of the device's
column, or the oracle's baseline with a warning saying why.

The host column is verified for real first (conftest's verified_cpu_project: `regen verify -t cpu`
on a copy of the project, as a user would on their machine); nothing of regen's pipeline is mocked. CUDA tests are GPU-marked
(benchmarks/ops_device.py gathers the same evidence on the H200).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

from conftest import REPO  # noqa: E402

@pytest.fixture(scope="module")
def project(verified_cpu_project):
    return verified_cpu_project


@pytest.fixture
def ops(project, monkeypatch):
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(project.parent / "lc"))
    import regen.ops as ops

    ops.configure(allow_unverified=False, root=project)
    yield ops
    ops.configure(allow_unverified=False)


def _baseline(kernel, inputs, **params):
    from regen.oracle import load_oracle
    from types import SimpleNamespace

    module = load_oracle(REPO / "oracles" / f"{kernel}.py")
    spec_params = {"rmsnorm": {"eps": 1e-6}, "layernorm": {"eps": 1e-5}}.get(kernel, {})
    return module.baseline(inputs, SimpleNamespace(params={**spec_params, **params}))


def test_every_library_spec_is_a_torch_op_with_its_signature_as_schema(ops):
    specs = {p.stem for p in (REPO / "specs").glob("*.yaml") if not p.stem.startswith("tx_")}
    assert set(ops.kernels()) == specs and ops.skipped() == {}
    # an output written over an input: a mutating op that returns the other outputs
    assert str(torch.ops.regen.kv_append.default._schema) == \
        "regen::kv_append(Tensor(a!) cache, Tensor new, int pos) -> ()"
    schema = torch.ops.regen.rmsnorm.default._schema
    assert [(a.name, str(a.type)) for a in schema.arguments] == \
        [("x", "Tensor"), ("weight", "Tensor"), ("eps", "float")]
    assert schema.arguments[2].default_value == pytest.approx(1e-6) and len(schema.returns) == 1
    assert str(torch.ops.regen.cross_entropy.default._schema) == \
        "regen::cross_entropy(Tensor logits, Tensor targets) -> Tensor"
    import inspect
    assert str(inspect.signature(ops.rmsnorm)) == "(x, weight, eps=1e-06)"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_calls_run_the_verified_host_artifact_and_agree_with_the_baseline(ops, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 1000, generator=g).to(dtype)
    w = torch.randn(1000, generator=g).to(dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ops.RegenOpsWarning)
        got = {"rmsnorm": ops.rmsnorm(x, w), "softmax": ops.softmax(x), "swiglu": ops.swiglu(x)}
    assert ops.runs("rmsnorm", x, w) == "rmsnorm@cpu"
    assert ops.runs("softmax", x) == "softmax@cpu"
    assert ops.runs("swiglu", x) == "swiglu@cpu"
    rtol = 1e-5 if dtype == torch.float32 else 2e-2
    want = {"rmsnorm": _baseline("rmsnorm", {"x": x, "weight": w})["y"],
            "softmax": _baseline("softmax", {"x": x})["y"],
            "swiglu": _baseline("swiglu", {"x": x})["y"]}
    for k in got:
        assert got[k].dtype == dtype and got[k].shape == want[k].shape, k
        torch.testing.assert_close(got[k].float(), want[k].float(), rtol=rtol, atol=1e-5)
    assert ops.rmsnorm(x, w, eps=0.5).sub(ops.rmsnorm(x, w)).abs().max() > 0  # the param is passed


def test_an_unverified_column_runs_the_baseline_with_one_warning_in_status_words(ops):
    x, w, b = torch.randn(4, 64), torch.randn(64), torch.randn(64)
    with pytest.warns(ops.RegenOpsWarning, match=r"regen.ops.layernorm runs torch's baseline on "
                      r"cpu: layernorm@cpu: verify — never verified on "):
        y = ops.layernorm(x, w, b)
    assert ops.runs("layernorm", x, w, b) is None
    torch.testing.assert_close(y, _baseline("layernorm", {"x": x, "weight": w, "bias": b})["y"],
                               rtol=0, atol=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ops.RegenOpsWarning)
        ops.layernorm(torch.randn(9, 64), w, b)   # same reason, other shape: no second warning
    state = {s["kernel"]: s for s in ops.status("cpu")}
    assert state["layernorm"]["runs"] == "torch baseline"
    assert state["rmsnorm"]["runs"] == "verified kernel"
    assert state["rmsnorm"]["why"].startswith("verified on ")


def test_unverified_artifacts_run_only_when_the_user_opts_in(ops):
    x, w, b = torch.randn(4, 64), torch.randn(64), torch.randn(64)
    ops.configure(allow_unverified=True)
    with pytest.warns(ops.RegenOpsWarning, match="runs the UNVERIFIED artifact layernorm@cpu"):
        y = ops.layernorm(x, w, b)
    assert ops.runs("layernorm", x, w, b) == "layernorm@cpu"
    torch.testing.assert_close(y, _baseline("layernorm", {"x": x, "weight": w, "bias": b})["y"],
                               rtol=1e-4, atol=1e-5)


def test_a_binary_other_than_the_verified_one_is_never_loaded(project, ops, tmp_path):
    from regen.keys import digest

    copy = tmp_path / "proj"
    for name in ("specs", "oracles", "targets", "cache"):
        shutil.copytree(project / name, copy / name)
    for path in (copy / "cache" / "softmax" / "cpu" / "records").glob("*.json"):
        rec = json.loads(path.read_text())
        rec.pop("digest")
        rec["compile"]["binary"] = "0" * 64   # the record now vouches for another binary
        rec["digest"] = digest(rec)
        path.write_text(json.dumps(rec))
    ops.configure(root=copy)
    with pytest.warns(ops.RegenOpsWarning, match=r"softmax@cpu: the binary built here \([0-9a-f]{12}\)"
                      r" is not the verified one \(000000000000\)"):
        ops.softmax(torch.randn(3, 8))
    assert ops.runs("softmax", torch.randn(3, 8)) is None


def test_bad_calls_are_refused_with_the_argument_and_what_the_spec_expects(ops):
    x, w = torch.randn(4, 64), torch.randn(64)
    cases = [
        ((x.t(), torch.randn(4)), r"x is not contiguous .* pass x.contiguous\(\)"),
        ((x, w.half()), r"weight has dtype float16, expected float32"),
        ((x, torch.randn(65)), r"weight.shape\[0\] is 65, expected N = 64 \(N=64 from x.shape\[1\]\)"),
        ((x.double(), w.double()), r"dtype float64 is not supported; the spec lists bfloat16, "
                                   r"float16, float32"),
        ((x[0], w), r"x has 1 dimensions \[64\], expected 2 \[M, N\]"),
    ]
    for args, message in cases:
        with pytest.raises(ops.SignatureError, match="regen.ops.rmsnorm: " + message):
            ops.rmsnorm(*args)
    with pytest.raises(ops.SignatureError, match=r"x.shape\[1\] is 5, which is not 2 \* N"):
        ops.swiglu(torch.randn(3, 5))


def test_an_input_at_an_unaligned_offset_runs_the_baseline(ops):
    x, w = torch.randn(4 * 64 + 1)[1:].view(4, 64), torch.randn(64)
    assert x.is_contiguous() and x.data_ptr() % 64
    with pytest.warns(ops.RegenOpsWarning, match="not 64-byte aligned"):
        y = ops.rmsnorm(x, w)
    torch.testing.assert_close(y, _baseline("rmsnorm", {"x": x, "weight": w})["y"], rtol=0, atol=0)


def test_torch_compile_traces_the_ops_in_one_graph_with_dynamic_shapes(ops):
    def block(x, w):
        h = ops.rmsnorm(x, w) * 2
        return ops.softmax(h) + ops.swiglu(torch.cat([h, h], -1))

    x, w = torch.randn(4, 64), torch.randn(64)
    explained = torch._dynamo.explain(block)(x, w)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    compiled = torch.compile(block, dynamic=True, fullgraph=True)
    for m, n in ((4, 64), (7, 32)):
        x, w = torch.randn(m, n), torch.randn(n)
        torch.testing.assert_close(compiled(x, w), block(x, w))


def test_fake_implementation_gives_output_shapes_from_the_signature(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        y = torch.ops.regen.swiglu(torch.empty(3, 10, dtype=torch.bfloat16))
        loss = torch.ops.regen.cross_entropy(torch.empty(5, 7), torch.empty(5, dtype=torch.int64))
        pooled = torch.ops.regen.maxpool3d(torch.empty(1, 2, 9, 7, 5))
    assert (tuple(y.shape), y.dtype) == ((3, 5), torch.bfloat16)
    assert (tuple(loss.shape), loss.dtype) == ((1,), torch.float32)
    assert tuple(pooled.shape) == (1, 2, 4, 3, 2)


def test_the_standalone_recipe_binding_agrees_with_the_judges_for_every_committed_recipe():
    from regen.dtypes import itemsize
    from regen.ops.launch import NoLaunch, bind_recipe
    from regen.project import Project
    from regen.recipe import bind, buffer_layouts, parse_recipe
    from regen.store import Store

    project = Project(REPO)
    store = Store(project.cache_dir)
    checked = mapped = repeated = 0
    for kernel in project.kernel_names():
        spec = project.spec(kernel)
        for target in store.targets_of(kernel):
            recipe = parse_recipe(store.current(kernel, target).recipe())
            for case in spec.cases:
                env = spec.case_env(case)
                buffers, shapes = buffer_layouts(spec, recipe, env)
                try:   # a view (an unfused plan's per-layer slice) is a pointer + bytes here
                    want = [(b.kernel, b.grid, b.block, b.shared_mem,
                             [("view", (a.value, a.offset * itemsize(buffers[a.value])))
                              if a.kind == "tensor" and a.offset else (a.kind, a.value)
                              for a in b.args]) for b in
                            bind(recipe, env, buffers, env["T"], shapes)]
                except ValueError:
                    with pytest.raises(NoLaunch):
                        bind_recipe(recipe.model_dump(mode="json"), env, buffers, env["T"], shapes)
                    continue
                got = bind_recipe(recipe.model_dump(mode="json"), env, buffers, env["T"], shapes)
                assert got == want
                mapped += any(kind == "tensormap" for *_l, args in got for kind, _v in args)
                repeated += len(recipe.all_launches()) != len(recipe.launches)
                checked += 1
    assert checked > 300 and mapped > 0 and repeated > 0


def test_a_cuda_plan_encodes_each_tensor_map_over_the_pointer_of_the_call():
    """regen.ops' launcher lays a map out as the 128-byte, 64-aligned parameter it is and encodes
    it per call over that call's buffer (the encoder itself needs a GPU: a recorder stands in)."""
    import ctypes
    import struct

    from regen.ops.launch import CudaLibrary, bind_recipe
    from regen.recipe import parse_recipe

    recipe = parse_recipe("launches:\n  - {kernel: k, grid: [1], block: [128], "
                          "args: [tma_a, c, int32:K, tma_b, float32:alpha]}\ntensor_maps:\n"
                          "  - {name: tma_a, tensor: a, dims: [K, M], strides: [K], box: [64, 64]}\n"
                          "  - {name: tma_b, tensor: b, dims: [K], strides: [], box: [64]}\n")
    env = {"M": 64, "K": 128, "alpha": 0.5, "T": "bfloat16"}
    ((kernel, grid, block, shared, args),) = bind_recipe(
        recipe.model_dump(mode="json"), env, {"a": "bfloat16", "b": "bfloat16", "c": "float32"},
        "bfloat16", {"a": [64, 128], "b": [128], "c": [64]})
    assert [kind for kind, _ in args] == ["tensormap", "tensor", "int32", "tensormap", "float32"]

    class Recorder:
        asked = []

        def get(self, bound, address):
            self.asked.append((bound.name, address))
            return bytes([len(self.asked)]) * 128

    lib = CudaLibrary(b"", "test")
    lib._tensor_maps = Recorder()
    prepared = lib._mapped_launch(None, grid, block, shared, kernel, args, {"a": 0, "c": 1, "b": 2})
    fill, params = prepared[8], prepared[9]
    for call, ptrs in enumerate(([0x1000, 0x2000, 0x3000], [0x5000, 0x6000, 0x7000])):
        fill(ptrs)
        slots = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p * 5)).contents
        assert [slots[0] % 64, slots[3] % 64] == [0, 0]
        assert ctypes.string_at(slots[0], 128) == bytes([2 * call + 1]) * 128
        assert ctypes.string_at(slots[3], 128) == bytes([2 * call + 2]) * 128
        assert struct.unpack("<Q", ctypes.string_at(slots[1], 8))[0] == ptrs[1]
        assert struct.unpack("<i", ctypes.string_at(slots[2], 4))[0] == 128
        assert struct.unpack("<f", ctypes.string_at(slots[4], 4))[0] == 0.5
    assert Recorder.asked == [("tma_a", 0x1000), ("tma_b", 0x3000), ("tma_a", 0x5000), ("tma_b", 0x7000)]


def test_importing_regen_ops_reads_the_named_project_and_builds_nothing(project, tmp_path):
    code = "import regen.ops as o; print(o._resolver.project.root)"
    env = {"REGEN_ROOT": str(project), "PYTHONPATH": str(REPO),
           "REGEN_LOCAL_CACHE": str(tmp_path / "lc"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(project)]
    assert not (tmp_path / "lc" / "ops").exists()   # binaries are built and loaded on first call


# -- CUDA (device machine) -----------------------------------------------------------------------
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.mark.gpu
def test_cuda_call_runs_the_verified_column_artifact_on_the_current_stream():
    _cuda()
    import regen.ops as ops

    ops.configure(root=REPO)
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = ops.rmsnorm(x, w)
    stream.synchronize()
    column = ops.runs("rmsnorm", x, w)
    status = {s["kernel"]: s for s in ops.status("cuda")}
    assert column == status["rmsnorm"]["column"], status["rmsnorm"]
    assert column is not None, status["rmsnorm"]["why"]
    want = torch.nn.functional.rms_norm(x.float(), (4096,), w.float(), 1e-6)
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=1e-2)


@pytest.mark.gpu
def test_cuda_graph_captures_regen_ops_after_a_warm_up():
    _cuda()
    import regen.ops as ops

    ops.configure(root=REPO)
    x = torch.randn(8, 1024, device="cuda")
    w = torch.randn(1024, device="cuda")
    ops.softmax(ops.rmsnorm(x, w))  # warm-up: loads the binary, binds the shape
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = ops.softmax(ops.rmsnorm(x, w))
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, torch.softmax(torch.nn.functional.rms_norm(x, (1024,), w, 1e-6),
                                                  -1), rtol=1e-4, atol=1e-6)


def test_packed_format_dims_and_parameter_dependent_shapes_bind_from_the_call():
    """mx_gemm's b is [N, K * 4 // 8] packed nibbles with [N, K // 32] scales; gemm_fp8's scales
    are [1 if per_tensor else M]: the op solves K from either and checks the rest."""
    from regen.export import signature_data
    from regen.ops.signature import Signature, SignatureError
    from regen.project import Project

    project = Project(REPO)
    mx = Signature(signature_data(project.spec("mx_gemm")))
    u8 = torch.uint8
    env = mx.bind([torch.empty(3, 64, dtype=u8), torch.empty(3, 2, dtype=u8),
                   torch.empty(5, 32, dtype=u8), torch.empty(5, 2, dtype=u8)], [])
    assert (env["M"], env["N"], env["K"]) == (3, 5, 64)
    with pytest.raises(SignatureError, match=r"b_scale.shape\[1\] is 3, expected K // 32 = 2"):
        mx.bind([torch.empty(3, 64, dtype=u8), torch.empty(3, 2, dtype=u8),
                 torch.empty(5, 32, dtype=u8), torch.empty(5, 3, dtype=u8)], [])
    fp8 = Signature(signature_data(project.spec("gemm_fp8")))
    a = torch.empty(4, 32, dtype=torch.float8_e4m3fn)
    b = torch.empty(6, 32, dtype=torch.float8_e4m3fn)
    rows = fp8.bind([a, b, torch.empty(4), torch.empty(6)], [False])
    assert (rows["M"], rows["N"], rows["K"]) == (4, 6, 32)
    assert fp8.bind([a, b, torch.empty(1), torch.empty(1)], [True])["per_tensor"] is True
    with pytest.raises(SignatureError, match=r"scale_a.shape\[0\] is 1, expected 1 if per_tensor"):
        fp8.bind([a, b, torch.empty(1), torch.empty(6)], [False])


def test_a_planned_call_skips_the_dispatcher_only_where_nothing_else_would_see_it(ops):
    from torch.utils._python_dispatch import TorchDispatchMode

    x = torch.randn(4, 64)
    y = ops.softmax(x)  # planned through the dispatcher
    torch.testing.assert_close(ops.softmax(x), y, rtol=0, atol=0)  # the plan, directly

    class Seen(TorchDispatchMode):
        calls = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.calls.append(str(func))
            return func(*args, **(kwargs or {}))

    with Seen():
        ops.softmax(x)
    assert "regen.softmax.default" in Seen.calls
    with torch.profiler.profile() as prof:
        ops.softmax(x)
    assert any(e.key == "regen::softmax" for e in prof.key_averages())
    # a cached shape does not skip validation: a non-contiguous view of it is still refused
    with pytest.raises(ops.SignatureError, match="x is not contiguous"):
        ops.softmax(torch.randn(64, 4).t())
    # eps given at its default and left out share one plan on both paths
    w = torch.randn(64)
    assert ops.rmsnorm(x, w, 1e-6).equal(ops.rmsnorm(x, w))


def test_an_output_written_over_an_input_is_a_mutating_op(ops):
    assert "Tensor(a!) logits" in str(torch.ops.regen.cross_entropy_bwd.default._schema)
    logits = torch.randn(6, 32)
    targets = torch.tensor([1, 2, -100, 4, 5, 31])
    ref = logits.clone().requires_grad_(True)
    want = torch.nn.functional.cross_entropy(ref, targets)
    want.backward()
    loss = ops.cross_entropy_bwd(logits, targets)  # the gradient replaces the logits
    assert ops.runs("cross_entropy_bwd", logits, targets) == "cross_entropy_bwd@cpu"
    torch.testing.assert_close(loss, want.detach().reshape(1), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logits, ref.grad, rtol=1e-5, atol=1e-7)


def test_technique_unit_tests_are_not_ops(ops):
    kernels = {s["kernel"] for s in ops.status("cpu")}
    assert {"rmsnorm", "llama_decode_step"} <= kernels
    assert not [k for k in kernels if k.startswith("tx_")]   # spec `library: false`
    assert not hasattr(ops, "tx_vector_copy")


def test_a_repeat_group_binds_per_layer_views_and_refuses_one_outside_its_buffer():
    from regen.ops.launch import NoLaunch, bind_recipe

    recipe = {"launches": [{"repeat": "NL", "index": "l", "launches": [
        {"kernel": "k_{dtype}", "grid": [1], "block": [32],
         "args": [{"tensor": "w", "offset": "l * N"}, "y", "N"]}]}]}
    dtypes, shapes = {"w": "bfloat16", "y": "float32"}, {"w": [3, 8], "y": [8]}
    got = bind_recipe(recipe, {"NL": 3, "N": 8}, dtypes, "bfloat16", shapes)
    assert [args[0] for *_l, args in got] == [("tensor", "w"), ("view", ("w", 16)),
                                              ("view", ("w", 32))]   # 8 bf16 = 16 bytes a layer
    assert got[0][0] == "k_bf16" and got[1][4][1:] == [("tensor", "y"), ("int64", 8)]
    with pytest.raises(NoLaunch, match="outside its 24 elements"):
        bind_recipe(recipe, {"NL": 4, "N": 8}, dtypes, "bfloat16", shapes)
