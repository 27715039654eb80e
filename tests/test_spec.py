"""Specs (regen/spec.py): a valid spec loads with its derived views (cases, shapes, bytes, selector
maps); an invalid one is refused with one InputError line that names the file and the field."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as NS

import pytest

from conftest import SCALE_SPEC
from regen.errors import InputError
from regen.spec import Case, load_spec, select

ROOT = Path(__file__).resolve().parent.parent

# a spec with what SCALE_SPEC lacks: two dtypes, a derived dim, an integer input, an in-place
# output, a bench case, named and parameterised cases, a bytes formula
AXPY = """\
name: axpy
summary: y += a * x over the first K of N rows.
intent: |
  For each of the first K rows, y[i, :] += a * x[i, :]; other rows of y are untouched.
signature:
  dtypes: [float32, bfloat16]
  inputs:
    - {name: x, shape: [N, D]}
    - {name: rows, dtype: int64, shape: [K]}
    - {name: y_in, shape: ["2 * N", D]}
  outputs:
    - {name: y, shape: ["2 * N", D], inplace_of: y_in}
  params:
    - {name: a, type: float, default: 2.0}
invariants:
  - {name: untouched, description: rows past K keep their values}
cases:
  - {N: 4, D: 8, K: 2}
  - {N: 4, D: 8, K: 1, dtype: bfloat16, params: {a: 0.5}, dist: constant}
  - {name: big, N: 1024, D: 4096, K: 1024, bench: true}
tolerance:
  float32: {atol: 1.0e-6, rtol: 1.0e-6}
  bfloat16: {atol: 1.0e-2, rtol: 1.0e-2}
profile:
  flops: "2 * K * D"
  floor_fraction: {h200: 0.8, nvidia: 0.7, "*": 0.5}
"""


def _write(tmp_path, text, name="scale"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


# -- valid specs -----------------------------------------------------------------------------------

def test_every_committed_spec_loads():
    for path in sorted((ROOT / "specs").glob("*.yaml")):
        assert load_spec(path).name == path.stem


def test_cases_split_into_correctness_and_bench(tmp_path):
    spec = load_spec(_write(tmp_path, AXPY, "axpy"))
    assert [c.label("float32") for c in spec.correctness_cases()] == [
        "N4xD8xK2:float32", "N4xD8xK1:bfloat16,a=0.5,constant"]
    assert [c.label("float32") for c in spec.bench_cases()] == ["big"]
    assert spec.cases[0].sizes == {"N": 4, "D": 8, "K": 2}


def test_case_env_shapes_dtypes_and_bytes(tmp_path):
    spec = load_spec(_write(tmp_path, AXPY, "axpy"))
    plain, half, _ = spec.cases
    assert spec.case_env(plain) == {"N": 4, "D": 8, "K": 2, "a": 2.0, "T": "float32"}
    assert spec.case_env(half)["a"] == 0.5 and spec.case_env(half)["T"] == "bfloat16"
    x, rows, y_in = spec.signature.inputs
    assert spec.tensor_shape(y_in, plain) == [8, 8]
    assert spec.tensor_dtype(x, half) == "bfloat16" and spec.tensor_dtype(rows, half) == "int64"
    # every tensor once, the in-place output counted as its input read and its write
    assert spec.case_bytes(plain) == 4 * 8 * 4 + 2 * 8 + 8 * 8 * 4 + 8 * 8 * 4
    assert spec.case_bytes(half) == 4 * 8 * 2 + 1 * 8 + 8 * 8 * 2 * 2
    assert spec.case_flops(plain) == 2 * 2 * 8
    assert spec.signature.symbols() == {"N", "D", "K"}


def test_a_bytes_formula_replaces_the_default_count(tmp_path):
    spec = load_spec(_write(tmp_path, SCALE_SPEC.replace(
        "tolerance:", 'profile:\n  bytes: "8 * M * N + 16"\ntolerance:')))
    assert spec.case_bytes(spec.cases[1]) == 8 * 3 * 130 + 16


def test_selector_maps_pick_the_most_specific_entry():
    h200 = NS(name="h200", family_name="sm90", arch="sm_90a", vendor="nvidia", language="cuda")
    h100 = NS(name="h100", family_name="sm90", arch="sm_90a", vendor="nvidia", language="cuda")
    a100 = NS(name="a100", family_name="a100", arch="sm_80", vendor="nvidia", language="cuda")
    cpu = NS(name="cpu", family_name="cpu", arch="x86-64-v2", vendor="host", language="cpp")
    mapping = {"h200": 1, "nvidia": 2, "*": 3, "sm_80": 4, "cpp": 5, "sm90": 6, "sm_90a": 7}
    assert select(mapping, h200) == 1          # name before everything
    assert select(mapping, h100) == 6          # family before arch
    assert select(mapping, a100) == 4          # arch before vendor
    assert select({"nvidia": 2, "*": 3}, a100) == 2
    assert select(mapping, cpu) == 5           # language before '*'
    assert select({"*": 3}, cpu) == 3
    assert select({"amd": 1}, cpu) is None


def test_case_labels():
    assert Case.model_validate({"M": 3, "N": 7}).label("float32") == "M3xN7:float32"
    assert Case.model_validate({"M": 3, "dtype": "float16", "dist": "large"}).label("x") == "M3:float16,large"
    assert Case.model_validate({"M": 3, "params": {"b": 1, "a": 2}}).label("f") == "M3:f,a=2,b=1"
    assert Case.model_validate({"M": 3, "name": "tiny"}).label("f") == "tiny"


# -- invalid specs: one line naming file and field ------------------------------------------------

def _edit(old, new):
    assert old in SCALE_SPEC, old
    return SCALE_SPEC.replace(old, new)


INVALID = [
    ("missing field", _edit("summary: Multiply every element by a scalar.\n", ""), "summary",
     "Field required"),
    ("unknown field", SCALE_SPEC + "colour: blue\n", "colour", "Extra inputs are not permitted"),
    ("bad name", _edit("name: scale", "name: Scale"), "name", "pattern"),
    ("name is not the file's", _edit("name: scale", "name: scaled"), "name", "expected name 'scale'"),
    ("unknown dtype", _edit("dtypes: [float32]", "dtypes: [float31]"), "signature.dtypes",
     "unknown dtype 'float31'"),
    ("no dtype", _edit("dtypes: [float32]", "dtypes: []"), "signature.dtypes", "at least one dtype"),
    ("bad tensor name", _edit("{name: x, dtype: T", "{name: 9x, dtype: T"), "signature.inputs.0.name",
     "pattern"),
    ("bad tensor dtype", _edit("{name: y, dtype: T", "{name: y, dtype: U"), "signature.outputs.0.dtype",
     "unknown dtype"),
    ("unsafe shape", _edit("shape: [M, N]}\n  outputs", "shape: [M, N.real]}\n  outputs"),
     "signature.inputs.0.shape", "not allowed"),
    ("unparsable shape", _edit("shape: [M, N]}\n  outputs", 'shape: [M, "N +"]}\n  outputs'),
     "signature.inputs.0.shape", "cannot parse"),
    ("reserved shape name", _edit("shape: [M, N]}\n  outputs", "shape: [M, dsize]}\n  outputs"),
     "signature", "reserved name 'dsize'"),
    ("reserved param name", _edit("{name: alpha, type: float", "{name: min, type: float"), "signature",
     "parameter name 'min' is reserved"),
    ("name used twice", _edit("{name: y, dtype: T", "{name: x, dtype: T"), "signature", "'x' is used twice"),
    ("in place of nothing", _edit("{name: y, dtype: T, shape: [M, N]}",
     "{name: y, dtype: T, shape: [M, N], inplace_of: z}"),
     "signature", "inplace_of 'z' is not an input"),
    ("bad param type", _edit("type: float, default", "type: complex, default"), "signature.params.0.type",
     "float"),
    ("case dtype not declared", _edit("{M: 1, N: 1}", "{M: 1, N: 1, dtype: float16}"), "cases[0]",
     "dtype 'float16' is not in signature.dtypes"),
    ("case misses a symbol", _edit("{M: 1, N: 1}", "{M: 1}"), "cases[0]",
     "shape symbols ['N'] are not given"),
    ("negative size", _edit("{M: 1, N: 1}", "{M: 1, N: -1}"), "cases[0].N", "non-negative integer"),
    ("fractional size", _edit("{M: 1, N: 1}", "{M: 1, N: 1.5}"), "cases[0].N", "non-negative integer"),
    ("unknown case param", _edit("{M: 1, N: 1}", "{M: 1, N: 1, params: {beta: 1}}"), "cases[0].params",
     "unknown parameters ['beta']"),
    ("only bench cases", _edit("  - {M: 1, N: 1}\n  - {M: 3, N: 130}", "  - {M: 1, N: 1, bench: true}"),
     "cases", "at least one correctness case"),
    ("no tolerance for a dtype", _edit("float32: {atol: 1.0e-6", "float16: {atol: 1.0e-6"), "tolerance",
     "no entry for dtype 'float32'"),
    ("negative tolerance", _edit("atol: 1.0e-6", "atol: -1.0"), "tolerance.float32.atol",
     "expected a finite number >= 0"),
    ("unknown baseline", SCALE_SPEC + "profile:\n  speedup: {numpy: 1.0}\n", "profile.speedup",
     "unknown baseline 'numpy'"),
    ("unsafe bytes formula", SCALE_SPEC + 'profile:\n  bytes: "__import__(\'os\')"\n', "profile.bytes",
     "not allowed"),
]


@pytest.mark.parametrize("text, field, message", [pytest.param(*row[1:], id=row[0]) for row in INVALID])
def test_an_invalid_spec_is_one_line_naming_file_and_field(tmp_path, text, field, message):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_spec(path)
    line = str(err.value)
    assert "\n" not in line, line
    assert line.startswith(str(path)), line
    assert field in line, f"the field {field!r} is not named: {line}"
    assert message in line, line


@pytest.mark.parametrize("text, message, line_no", [
    ("name: scale\nsummary: [unclosed\n", "YAML syntax error", 3),
    ("- a list\n- not a mapping\n", "expected a YAML mapping at the top level, got list", None),
])
def test_unreadable_yaml_names_file_and_line(tmp_path, text, message, line_no):
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        load_spec(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    assert err.value.line == line_no


def test_a_missing_spec_file_is_named(tmp_path):
    with pytest.raises(InputError, match="file not found") as err:
        load_spec(tmp_path / "nope.yaml")
    assert err.value.file == str(tmp_path / "nope.yaml")


def test_a_fixed_spec_loads_after_an_error(tmp_path):
    """Errors are not memoised: the same path loads once its content is fixed."""
    path = _write(tmp_path, _edit("{M: 1, N: 1}", "{M: 1}"))
    with pytest.raises(InputError):
        load_spec(path)
    path.write_text(SCALE_SPEC)
    assert load_spec(path).cases[0].sizes == {"M": 1, "N": 1}


# -- block-scaled formats --------------------------------------------------------------------------

MX_SPEC = """\
name: mx
summary: A block-scaled matrix product.
intent: |
  C = A B^T with A and B in an MX format.
signature:
  dtypes: [bfloat16]
  inputs:
    - {name: a, format: mxfp4, shape: [M, K]}
    - {name: b, format: mxfp6_e3m2, shape: [N, K]}
  outputs:
    - {name: c, shape: [M, N]}
cases:
  - {M: 3, N: 5, K: 64}
tolerance:
  bfloat16: {atol: 1.0e-2, rtol: 1.0e-2}
"""


def test_a_format_tensor_is_stored_as_packed_data_and_e8m0_scales(tmp_path):
    spec = load_spec(_write(tmp_path, MX_SPEC, "mx"))
    sig = spec.signature
    assert [(t.name, t.dtype, t.storage) for t in sig.inputs] == [
        ("a", "uint8", "data"), ("a_scale", "uint8", "scale"),
        ("b", "uint8", "data"), ("b_scale", "uint8", "scale")]
    case = spec.cases[0]
    assert [spec.tensor_shape(t, case) for t in sig.inputs] == [[3, 32], [3, 2], [5, 48], [5, 2]]
    assert sig.inputs[0].logical_shape == ["M", "K"]
    # bytes moved: the packed storage, not the logical elements
    assert spec.case_bytes(case) == 3 * 32 + 3 * 2 + 5 * 48 + 5 * 2 + 3 * 5 * 2
    # the validated form loads again unchanged (memoised and dumped specs round-trip)
    assert type(spec).model_validate(spec.model_dump()) == spec


@pytest.mark.parametrize("edit, message", [
    (("format: mxfp4", "format: mxfp3"), "signature.inputs[0].format: unknown format 'mxfp3'"),
    (("format: mxfp4,", "format: mxfp4, dtype: uint8,"), "leave dtype out"),
    (("{M: 3, N: 5, K: 64}", "{M: 3, N: 5, K: 40}"),
     "cases[0]: a (mxfp4) has last dimension K = 40, not a multiple of 32"),
    (("shape: [M, K]}\n    - {name: b", "shape: [M, 48]}\n    - {name: b"),
     "the last dimension 48 is not a multiple of 32"),
    (("{name: c, shape: [M, N]}", "{name: c, shape: [M, N]}\n    - {name: a_scale, shape: [M]}"),
     "name 'a_scale' is used twice"),
])
def test_a_bad_format_declaration_is_one_line_naming_the_field(tmp_path, edit, message):
    with pytest.raises(InputError) as err:
        load_spec(_write(tmp_path, MX_SPEC.replace(*edit), "mx"))
    assert message in str(err.value) and "mx.yaml" in str(err.value)
    assert "\n" not in str(err.value)


def test_hand_written_storage_that_differs_from_the_format_is_refused(tmp_path):
    from regen.spec import Signature

    sig = load_spec(_write(tmp_path, MX_SPEC, "mx")).signature.model_dump()
    sig["inputs"][1]["shape"] = ["M", "K // 16"]
    with pytest.raises(ValueError, match="storage buffers differ from what format mxfp4 derives"):
        Signature.model_validate(sig)


def test_profile_compute_names_the_flops_peak_that_bounds_the_case():
    """gemm_fp8 writes bf16 but computes in e4m3: its roofline uses the target's flops_float8."""
    from regen.profile import floor_terms
    from regen.target import load_target

    spec = load_spec(ROOT / "specs" / "gemm_fp8.yaml")
    h200 = load_target(ROOT / "targets" / "h200.yaml")
    case = next(c for c in spec.bench_cases() if c.sizes == {"M": 8192, "N": 8192, "K": 8192})
    seconds, bound, peak = max(floor_terms(spec, h200, case), key=lambda t: t[0])
    assert bound == "compute" and peak is h200.peak("flops_float8")
    assert seconds == pytest.approx(2 * 8192 ** 3 / h200.peak("flops_float8").value)
    plain = spec.model_copy(update={"profile": spec.profile.model_copy(update={"compute": None})})
    assert max(floor_terms(plain, h200, case), key=lambda t: t[0])[2] is h200.peak("flops_bfloat16")


def test_a_command_line_case_is_checked_like_the_specs_own_cases():
    from regen.commands.bench import parse_case

    spec = load_spec(ROOT / "specs" / "rmsnorm.yaml")
    case = parse_case(spec, "M=1, N=4096, dtype=float16, eps=1e-5")
    assert (case.sizes, case.dtype, case.params) == ({"M": 1, "N": 4096}, "float16", {"eps": 1e-5})
    assert case.bench and not case.floor   # latency-bound territory: timed, no floor verdict
    for text, message in [("M=1", "shape symbols ['N'] are not given"),
                          ("M=1,N=8,dtype=int8", "dtype 'int8' is not in signature.dtypes"),
                          ("M=1,K=8", "rmsnorm has no 'K' (expected its shape symbols ['M', 'N']"),
                          ("M=1,N=-3", "N: expected a non-negative integer"),
                          ("M=1,N=8,eps=x", "eps: expected a float, got 'x'"),
                          ("M=1,N", "expected NAME=VALUE, got 'N'")]:
        with pytest.raises(InputError) as err:
            parse_case(spec, text)
        assert message in str(err.value) and f"--case {text}" in str(err.value)


def test_bench_applies_each_command_line_case_to_the_kernels_it_fits():
    from regen.commands.bench import _command_line_cases
    from regen.project import Project

    project = Project(ROOT)
    nodes = [NS(kernel="rmsnorm", skip=False), NS(kernel="rope", skip=False)]
    cases = _command_line_cases(project, nodes, ["M=8,N=4096", "B=1,S=1,H=32,D=128"])
    assert [c.sizes for c in cases["rmsnorm"]] == [{"M": 8, "N": 4096}]
    assert [c.sizes for c in cases["rope"]] == [{"B": 1, "S": 1, "H": 32, "D": 128}]
    with pytest.raises(InputError, match="no --case fits rope"):
        _command_line_cases(project, nodes, ["M=8,N=4096"])
    with pytest.raises(InputError, match="fits none of the kernels selected"):
        _command_line_cases(project, nodes[:1], ["M=8,N=4096", "B=1,S=1,H=32,D=128"])
    # over every kernel (none named): those no case fits are left out
    assert set(_command_line_cases(project, nodes, ["M=8,N=4096"], named=False)) == {"rmsnorm"}
