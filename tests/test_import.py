"""regen import: KernelBench problems and GPU MODE tasks (small ones written here in those formats)
become specs and oracles that verify against the original reference code."""

from __future__ import annotations

import importlib.util
import textwrap
from types import SimpleNamespace

import pytest

from conftest import make_project, regen, write_handoff

torch = pytest.importorskip("torch")

RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
'''

GEMM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear layer, then a scale."""

    def __init__(self, in_features, out_features, scale):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.scale = scale

    def forward(self, x):
        return self.linear(x) * self.scale


batch_size = 128
in_features = 64
out_features = 96
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, scale]
'''

RELU_CPP = """\
#include <cstdint>
extern "C" void relu_f32(const float* x, float* y, int64_t B, int64_t D) {
  for (int64_t i = 0; i < B * D; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""
RELU_RECIPE = "launches:\n  - kernel: relu_{dtype}\n    args: [x, y, batch_size, dim]\n"

TASK_YML = """\
lang: "py"
description: |
  Row softmax of a float32 matrix.
tests:
  - {"rows": 3, "cols": 100, "seed": 1}
  - {"rows": 5, "cols": 257, "seed": 2}
benchmarks:
  - {"rows": 1024, "cols": 4096, "seed": 3}
"""

REFERENCE = '''\
from utils import make_match_reference
from task import input_t, output_t
import torch


def generate_input(rows: int, cols: int, seed: int) -> input_t:
    gen = torch.Generator(device="cuda")
    gen.manual_seed(seed)
    return torch.randn(rows, cols, device="cuda", dtype=torch.float32, generator=gen)


def ref_kernel(data: input_t) -> output_t:
    return torch.softmax(data, dim=-1)


check_implementation = make_match_reference(ref_kernel, rtol=1e-4, atol=1e-6)
'''


def _oracle(path):
    spec = importlib.util.spec_from_file_location("imported_oracle", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _case(sizes, dtype=torch.float32):
    return SimpleNamespace(sizes=sizes, dtype=dtype, params={}, dist="normal", device="cpu")


def test_kernelbench_problem_becomes_a_spec_whose_oracle_verifies_a_handoff(tmp_path):
    root = make_project(tmp_path / "proj", kernels=())
    (tmp_path / "19_ReLU.py").write_text(RELU)
    proc = regen(root, "import", "kernelbench", str(tmp_path / "19_ReLU.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "wrote specs/relu.yaml and oracles/relu.py: 1 inputs, 1 output, 1 correctness and 1 " \
           "bench case, dtype float32" in proc.stdout
    import yaml
    spec = yaml.safe_load((root / "specs" / "relu.yaml").read_text())
    assert spec["signature"]["inputs"] == [{"name": "x", "dtype": "T", "shape": ["batch_size", "dim"]}]
    assert spec["cases"] == [{"batch_size": 8, "dim": 4097, "dtype": "float32"},
                             {"batch_size": 16, "dim": 16384, "dtype": "float32", "bench": True}]
    assert spec["tolerance"] == {"float32": {"atol": 0.01, "rtol": 0.01}}
    # an honest implementation is verified against the original module; a wrong one is not
    write_handoff(tmp_path / "h", "relu", "cpu", RELU_CPP, RELU_RECIPE, root)
    ok = regen(root, "accept", str(tmp_path / "h"), "--author", "test")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    write_handoff(tmp_path / "bad", "relu", "cpu", RELU_CPP.replace("? x[i] : 0.0f", "? x[i] : x[i]"),
                  RELU_RECIPE, root)
    bad = regen(root, "accept", str(tmp_path / "bad"), "--author", "test")
    assert bad.returncode != 0 and "relu" in bad.stdout + bad.stderr


def test_kernelbench_module_parameters_become_inputs_and_the_reference_is_the_module(tmp_path):
    root = make_project(tmp_path / "proj", kernels=())
    (tmp_path / "9_Gemm_Scale.py").write_text(GEMM)
    proc = regen(root, "import", "kernelbench", str(tmp_path / "9_Gemm_Scale.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import yaml
    spec = yaml.safe_load((root / "specs" / "gemm_scale.yaml").read_text())
    assert [(t["name"], t["shape"]) for t in spec["signature"]["inputs"]] == [
        ("x", ["batch_size", "in_features"]), ("linear_weight", ["out_features", "in_features"]),
        ("linear_bias", ["out_features"])]
    oracle = _oracle(root / "oracles" / "gemm_scale.py")
    case = _case({"batch_size": 5, "in_features": 7, "out_features": 3})
    inputs = oracle.make_inputs(case, 11)
    assert not torch.equal(inputs["x"], oracle.make_inputs(case, 12)["x"])  # drawn from the seed
    want = (inputs["x"].double() @ inputs["linear_weight"].double().T
            + inputs["linear_bias"].double()) * 0.5
    torch.testing.assert_close(oracle.reference(inputs, case)["y"], want)
    torch.testing.assert_close(oracle.baseline(inputs, case)["y"], want.float(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("body, message", [
    ("def get_inputs():\n    return [torch.randn(4, 8), 3.0]\n",
     "get_inputs()[1] is a float, not a tensor: scalar inputs are spec params"),
    ("def get_inputs():\n    return [torch.randn(8, 4).t()]\n",
     "get_inputs()[0] is not contiguous"),
    ("def get_inputs():\n    return [torch.randn(4, 8), torch.randn(4, 8)]\n",
     "Model(*get_init_inputs())(*get_inputs()) raised TypeError: "),
])
def test_kernelbench_what_a_spec_cannot_say_is_one_clear_line_and_nothing_is_written(
        tmp_path, body, message):
    root = make_project(tmp_path / "proj", kernels=())
    src = RELU.replace(RELU[RELU.index("def get_inputs"):RELU.index("def get_init_inputs")], body + "\n\n")
    (tmp_path / "p.py").write_text(src)
    proc = regen(root, "import", "kernelbench", str(tmp_path / "p.py"))
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not list((root / "specs").glob("*.yaml"))


def test_gpumode_task_becomes_a_spec_with_its_tests_benchmarks_and_tolerance(tmp_path):
    root = make_project(tmp_path / "proj", kernels=())
    task = tmp_path / "softmax_py"
    task.mkdir()
    (task / "task.yml").write_text(TASK_YML)
    (task / "reference.py").write_text(REFERENCE)
    proc = regen(root, "import", "gpumode", str(task))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import yaml
    spec = yaml.safe_load((root / "specs" / "softmax_py.yaml").read_text())
    assert spec["signature"]["inputs"] == [{"name": "x", "dtype": "T", "shape": ["rows", "cols"]}]
    assert spec["signature"]["outputs"] == [{"name": "out", "dtype": "T", "shape": ["rows", "cols"]}]
    assert spec["cases"] == [{"rows": 3, "cols": 100, "dtype": "float32"},
                             {"rows": 5, "cols": 257, "dtype": "float32"},
                             {"rows": 1024, "cols": 4096, "dtype": "float32", "bench": True}]
    assert spec["tolerance"] == {"float32": {"atol": 1e-6, "rtol": 1e-4}}
    assert spec["summary"] == "Row softmax of a float32 matrix."
    oracle = _oracle(root / "oracles" / "softmax_py.py")
    case = _case({"rows": 4, "cols": 33})
    inputs = oracle.make_inputs(case, 5)
    assert inputs["x"].device.type == "cpu" and inputs["x"].shape == (4, 33)
    torch.testing.assert_close(oracle.reference(inputs, case)["out"], torch.softmax(inputs["x"], -1))
    status = regen(root, "status", "softmax_py", "-t", "cpu")
    assert "softmax_py@cpu" in status.stdout and "generate" in status.stdout


def test_gpumode_task_whose_reference_fills_an_output_buffer_is_refused_clearly(tmp_path):
    root = make_project(tmp_path / "proj", kernels=())
    task = tmp_path / "fill"
    task.mkdir()
    (task / "task.yml").write_text(TASK_YML)
    (task / "reference.py").write_text(textwrap.dedent('''\
        import torch


        def generate_input(rows, cols, seed):
            x = torch.randn(rows, cols, device="cuda")
            return x, torch.empty_like(x)


        def ref_kernel(data):
            x, out = data
            out.copy_(x * 2)
            return out
        '''))
    proc = regen(root, "import", "gpumode", str(task))
    assert proc.returncode == 2
    assert "reference.py: ref_kernel writes output 0 into one of its inputs" in proc.stderr
    assert not (root / "specs" / "fill.yaml").exists()
