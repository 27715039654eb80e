"""Launch recipes (regen/recipe.py): how regen's own host code calls an artifact. parse_recipe
accepts the documented form and refuses anything else with an InputError naming launch.yaml and the
field; bind() picks launches by their `when` guards and types every argument."""

from __future__ import annotations

import pytest

from regen.errors import InputError
from regen.recipe import BoundArg, bind, parse_recipe, split_typed, workspace_shapes

RECIPE = """\
launches:
  - kernel: rmsnorm_{dtype}
    when: "N <= 16384"
    grid: ["M", 1, 1]
    block: [256]
    shared_mem: "N * 4"
    args: [x, weight, y, M, N, "float32:eps"]
  - kernel: rmsnorm_split_{dtype}
    when: "N > 16384"
    grid: ["M * ceil_div(N, 4096)"]
    block: [1024, 1, 1]
    args: [x, partial, M, N, "int32:N // 2", "float64:eps", "int64:eps * 1000", 0.5, "M / 2", 3]
workspace:
  - {name: partial, dtype: float32, shape: ["M", "ceil_div(N, 4096)"], zero: true}
  - {name: scratch, dtype: bfloat16, shape: [8]}
"""
BUFFERS = {"x", "weight", "y", "partial", "scratch"}


def _env(n, m=4):
    return {"M": m, "N": n, "eps": 1e-5, "T": "bfloat16"}


def test_the_documented_form_parses_with_defaults_filled():
    recipe = parse_recipe(RECIPE)
    first, second = recipe.launches
    assert first.block == [256, 1, 1] and second.grid == ["M * ceil_div(N, 4096)", 1, 1]
    assert parse_recipe("launches:\n  - kernel: k\n    args: []\n").launches[0].grid == [1, 1, 1]
    assert [w.name for w in recipe.workspace] == ["partial", "scratch"]


def test_when_guards_pick_the_launches():
    recipe = parse_recipe(RECIPE)
    (short,) = bind(recipe, _env(4096), BUFFERS, "bfloat16")
    assert short.kernel == "rmsnorm_bf16"
    assert (short.grid, short.block, short.shared_mem) == ((4, 1, 1), (256, 1, 1), 4096 * 4)
    (long,) = bind(recipe, _env(20000), BUFFERS, "float32")
    assert long.kernel == "rmsnorm_split_f32" and long.grid == (4 * 5, 1, 1)


def test_every_applying_launch_runs_in_order():
    recipe = parse_recipe("launches:\n  - {kernel: a, args: []}\n  - {kernel: b, when: 'N > 1', args: []}\n"
                          "  - {kernel: c, when: 'N > 2', args: []}\n")
    assert [launch.kernel for launch in bind(recipe, {"N": 2}, set(), "float32")] == ["a", "b"]


def test_no_applying_launch_is_an_error():
    recipe = parse_recipe("launches:\n  - {kernel: a, when: 'N > 1', args: []}\n")
    with pytest.raises(ValueError, match="no launch of the recipe applies"):
        bind(recipe, {"N": 1}, set(), "float32")


def test_arguments_are_typed_by_prefix_or_by_value():
    recipe = parse_recipe(RECIPE)
    (short,) = bind(recipe, _env(4096), BUFFERS, "bfloat16")
    assert short.args == (BoundArg("tensor", "x"), BoundArg("tensor", "weight"), BoundArg("tensor", "y"),
                          BoundArg("int64", 4), BoundArg("int64", 4096), BoundArg("float32", 1e-5))
    (long,) = bind(recipe, _env(20000), BUFFERS, "bfloat16")
    assert long.args[4:] == (BoundArg("int32", 10000), BoundArg("float64", 1e-5), BoundArg("int64", 0),
                             BoundArg("float32", 0.5), BoundArg("float32", 2.0), BoundArg("int64", 3))
    for arg in long.args[4:]:
        assert isinstance(arg.value, float if arg.kind.startswith("float") else int)


@pytest.mark.parametrize("arg, typed", [
    ("int32:N", ("int32", "N")), ("float64: eps * 2", ("float64", "eps * 2")), (" int64 :M", ("int64", "M")),
    ("N", (None, "N")), ("x", (None, "x")), ("uint8:N", (None, "uint8:N")),
])
def test_split_typed(arg, typed):
    assert split_typed(arg) == typed


def test_a_tensor_name_passes_the_buffer_not_an_expression():
    recipe = parse_recipe("launches:\n  - {kernel: k, args: [N, x]}\n")
    (launch,) = bind(recipe, {"N": 3, "x": 7}, {"N"}, "float32")
    assert launch.args == (BoundArg("tensor", "N"), BoundArg("int64", 7))


def test_workspace_shapes_are_evaluated_per_case():
    assert workspace_shapes(parse_recipe(RECIPE), _env(20000)) == {
        "partial": ("float32", [4, 5], True), "scratch": ("bfloat16", [8], False)}


INVALID = [
    ("not yaml", "launches: [\n", "launch.yaml:2", "YAML syntax error: did not find expected node content"),
    ("no launches", "workspace: []\n", "launches", "Field required"),
    ("empty launches", "launches: []\n", "launches", "at least 1 item"),
    ("unknown key", "launches:\n  - {kernel: k, args: [], threads: 4}\n", "launches.0.threads",
     "Extra inputs"),
    ("no args", "launches:\n  - {kernel: k}\n", "launches.0.args", "Field required"),
    ("four grid dims", "launches:\n  - {kernel: k, grid: [1, 1, 1, 1], args: []}\n", "launches.0.grid",
     "1 to 3 dimensions"),
    ("unsafe grid", "launches:\n  - {kernel: k, grid: ['M.bit_length()'], args: []}\n", "launches.0.grid",
     "not allowed"),
    ("unsafe arg", "launches:\n  - kernel: k\n    args: [\"__import__('os')\"]\n", "launches.0.args",
     "not allowed"),
    ("unknown type prefix", "launches:\n  - {kernel: k, args: ['uint8:N']}\n", "launches.0.args",
     "cannot parse"),
    ("bad workspace dtype",
     "launches:\n  - {kernel: k, args: []}\nworkspace:\n  - {name: w, dtype: f32, shape: [1]}\n",
     "workspace.0.dtype", "unknown dtype 'f32'"),
]


@pytest.mark.parametrize("text, field, message", [pytest.param(*row[1:], id=row[0]) for row in INVALID])
def test_an_invalid_recipe_is_one_line_naming_file_and_field(text, field, message):
    with pytest.raises(InputError) as err:
        parse_recipe(text, "handoff/launch.yaml")
    line = str(err.value)
    assert "\n" not in line, line
    assert line.startswith("handoff/launch.yaml"), line
    if field:
        assert field in line, f"the field {field!r} is not named: {line}"
    assert message in line, line


def test_a_guard_or_argument_that_cannot_be_evaluated_is_an_expr_error():
    from regen.expr import ExprError
    recipe = parse_recipe("launches:\n  - {kernel: k, when: 'M // N > 1', args: ['M / N']}\n")
    with pytest.raises(ExprError, match="ZeroDivisionError"):
        bind(recipe, {"M": 4, "N": 0}, set(), "float32")
    with pytest.raises(ExprError, match="unknown name 'M'"):
        bind(recipe, {"N": 1}, set(), "float32")


# -- tensor maps (regen/tensormap.py) ------------------------------------------------------------
MAPPED = """\
launches:
  - kernel: gemm_tma_{dtype}
    when: "K % 8 == 0"
    grid: [132]
    block: [384]
    args: [tma_a, tma_b, c, K]
  - kernel: gemm_plain_{dtype}
    when: "K % 8 != 0"
    args: [a, b, c, K]
tensor_maps:
  - {name: tma_a, tensor: a, dims: [K, M], strides: [K], box: [64, 128], swizzle: 128B,
     l2_promotion: 256B}
  - {name: tma_b, tensor: b, dims: [K, N], strides: [K], box: [64, "min(N, 256)"], swizzle: 128B,
     oob_fill: nan}
"""
GEMM_BUFFERS = {"a": "bfloat16", "b": "bfloat16", "c": "bfloat16"}


def _gemm(m=256, n=512, k=1024):
    return {"M": m, "N": n, "K": k, "T": "bfloat16"}


def test_a_tensor_map_argument_binds_its_declaration_for_the_case():
    (launch,) = bind(parse_recipe(MAPPED), _gemm(n=100), GEMM_BUFFERS, "bfloat16",
                     shapes={"a": [256, 1024], "b": [100, 1024], "c": [256, 100]})
    kinds = [arg.kind for arg in launch.args]
    assert kinds == ["tensormap", "tensormap", "tensor", "int64"]
    a, b = launch.args[0].value, launch.args[1].value
    assert (a.tensor, a.dtype, a.dims, a.strides, a.box) == ("a", "bfloat16", (1024, 256), (1024,), (64, 128))
    assert (b.dims, b.box, b.oob_fill, b.swizzle) == ((1024, 100), (64, 100), "nan", "128B")
    assert a.box_bytes == 64 * 128 * 2
    assert a.encode_args(0x7000)["strides"] == [2048] and a.encode_args(0x7000)["l2_promotion"] == 256


def test_a_map_the_case_does_not_launch_is_never_bound():
    """K = 7 rows are not 16-byte aligned: the plain launch runs and no map is checked."""
    (launch,) = bind(parse_recipe(MAPPED), _gemm(k=7), GEMM_BUFFERS, "bfloat16")
    assert launch.kernel == "gemm_plain_bf16"


def test_fp8_tiles_move_as_bytes_and_the_map_takes_the_buffers_dtype():
    (launch,) = bind(parse_recipe(MAPPED), _gemm(k=128), {**GEMM_BUFFERS, "a": "float8_e4m3fn"},
                     "bfloat16")
    assert launch.args[0].value.element_type == "UINT8" and launch.args[0].value.box_bytes == 64 * 128


MAP_ERRORS = [
    ("unaligned row stride", {"K": 100}, {}, "strides[0] = 100 elements = 200 bytes"),
    ("box past 256", {}, {"box": "[64, 512]"}, "box[1] = 512; every box dim must be 1..256"),
    ("inner box not 16 bytes", {}, {"box": "[12, 128]", "swizzle": "none"},
     "box[0] = 12 elements = 24 bytes"),
    ("inner box wider than its swizzle", {}, {"swizzle": "64B"}, "spans 128 bytes, more than the 64B"),
    ("empty dimension", {"M": 0}, {}, "dims[1] = 0"),
    ("nan fill on bytes", {}, {"oob_fill": "nan"}, "oob_fill nan needs a floating-point"),
]


@pytest.mark.parametrize("sizes, change, message", [pytest.param(*r[1:], id=r[0]) for r in MAP_ERRORS])
def test_a_map_the_driver_would_refuse_is_one_line_naming_map_and_field(sizes, change, message):
    decl = {"box": "[64, 128]", "swizzle": "128B", **change}
    fields = ", ".join(f"{k}: {v}" for k, v in decl.items())
    text = ("launches:\n  - {kernel: k, args: [tma_a]}\ntensor_maps:\n"
            f"  - {{name: tma_a, tensor: a, dims: [K, M], strides: [K], {fields}}}\n")
    dtype = "uint8" if "oob_fill" in change else "bfloat16"
    with pytest.raises(ValueError) as err:
        bind(parse_recipe(text), {**_gemm(), **sizes}, {"a": dtype}, "bfloat16")
    line = str(err.value)
    assert "\n" not in line and line.startswith("tensor map 'tma_a' (over 'a')"), line
    assert message in line, line


def test_a_map_reaching_past_its_buffer_is_refused_where_shapes_are_known():
    """dims and strides are the recipe's: a map that addresses more than the buffer holds would
    let a kernel read a neighbouring allocation."""
    text = ("launches:\n  - {kernel: k, args: [tma_a]}\ntensor_maps:\n"
            "  - {name: tma_a, tensor: a, dims: [K, 'M + 1'], strides: [K], box: [64, 64]}\n")
    with pytest.raises(ValueError, match=r"reach element 263167, past the buffer's 262144 elements"):
        bind(parse_recipe(text), _gemm(), {"a": "bfloat16"}, "bfloat16", shapes={"a": [256, 1024]})


def test_a_map_over_a_buffer_that_does_not_exist_is_named():
    text = ("launches:\n  - {kernel: k, args: [tma_x]}\ntensor_maps:\n"
            "  - {name: tma_x, tensor: x, dims: [8], strides: [], box: [8]}\n")
    with pytest.raises(ValueError, match="tensor map 'tma_x' .over 'x'.: no buffer named 'x'"):
        bind(parse_recipe(text), {}, {"a": "float32"}, "float32")


@pytest.mark.parametrize("body, field, message", [
    ("  - {name: m, tensor: a, dims: [K, M], strides: [], box: [64, 64]}\n", "tensor_maps.0",
     "strides: expected 1 element strides"),
    ("  - {name: m, tensor: a, dims: [K, M], strides: [K], box: [64]}\n", "tensor_maps.0",
     "box: expected 2 entries"),
    ("  - {name: m, tensor: a, dims: [1, 2, 3, 4, 5, 6], strides: [1, 2, 3, 4, 5], box: [1, 1, 1, 1, 1, 1]}\n",
     "tensor_maps.0", "dims: expected 1 to 5 dimensions"),
    ("  - {name: m, tensor: a, dims: [K], strides: [], box: [8], swizzle: 128}\n", "tensor_maps.0.swizzle",
     "valid string"),
    ("  - {name: m, tensor: a, dims: [K], strides: [], box: [8], swizzle: 256B}\n", "tensor_maps.0",
     "swizzle: '256B' is not one of none, 32B, 64B, 128B"),
    ("  - {name: m, tensor: a, dims: [K], strides: [], box: [8], l2: 64B}\n", "tensor_maps.0.l2",
     "Extra inputs"),
    ("  - {name: m, tensor: a, dims: [K], strides: [], box: [8]}\n  - {name: m, tensor: b, dims: [K], "
     "strides: [], box: [8]}\n", "", "'m' is declared twice"),
])
def test_an_invalid_tensor_map_declaration_names_file_and_field(body, field, message):
    with pytest.raises(InputError) as err:
        parse_recipe("launches:\n  - {kernel: k, args: [m]}\ntensor_maps:\n" + body, "h/launch.yaml")
    line = str(err.value)
    assert "\n" not in line and line.startswith("h/launch.yaml"), line
    assert field in line and message in line, line
GROUPED = """\
launches:
  - {kernel: first, args: [x]}
  - repeat: "NL"
    index: layer
    launches:
      - {kernel: norm, when: "layer == 0", args: [x, {tensor: w, offset: "layer * N"}, layer]}
      - {kernel: norm, when: "layer > 0", args: [y, {tensor: w, offset: "layer * N"}, layer]}
      - {kernel: mix, args: [{tensor: y, offset: "(layer % 2) * N"}]}
  - {kernel: last, args: [y]}
"""


def test_a_repeat_group_runs_its_launches_per_iteration_with_offset_views():
    recipe = parse_recipe(GROUPED)
    assert [x.kernel for x in recipe.all_launches()] == ["first", "norm", "norm", "mix", "last"]
    bound = bind(recipe, {"NL": 3, "N": 10, "T": "float32"}, {"x", "y", "w"}, "float32")
    assert [b.kernel for b in bound] == ["first", "norm", "mix", "norm", "mix", "norm", "mix", "last"]
    assert [b.args[1].offset for b in bound if b.kernel == "norm"] == [0, 10, 20]
    assert [b.args[0].value for b in bound if b.kernel == "norm"] == ["x", "y", "y"]
    assert [b.args[0].offset for b in bound if b.kernel == "mix"] == [0, 10, 0]
    assert bound[1].args[2] == BoundArg("int64", 0) and bound[5].args[2] == BoundArg("int64", 2)
    assert [b.kernel for b in bind(recipe, {"NL": 0, "N": 1, "T": "float32"}, {"x", "y", "w"},
                                   "float32")] == ["first", "last"]


def test_a_repeat_group_refuses_bad_counts_offsets_and_nesting():
    recipe = parse_recipe(GROUPED)
    with pytest.raises(ValueError, match="repeat 'NL' gives -1; expected an integer"):
        bind(recipe, {"NL": -1, "N": 1, "T": "float32"}, {"x", "y", "w"}, "float32")
    with pytest.raises(ValueError, match="offset 'layer \\* N' of w gives -3"):
        bind(recipe, {"NL": 2, "N": -3, "T": "float32"}, {"x", "y", "w"}, "float32")
    with pytest.raises(ValueError, match="repeat index 'layer' is also a symbol"):
        bind(recipe, {"NL": 2, "N": 1, "layer": 1, "T": "float32"}, {"x", "y", "w"}, "float32")
    nested = GROUPED.replace("      - {kernel: mix,", "      - {repeat: 2, launches: [{kernel: a, args: []}]}\n"
                                                   "      - {kernel: mix,")
    with pytest.raises(InputError, match="launches.1.launches.2"):
        parse_recipe(nested, "launch.yaml")
    with pytest.raises(InputError) as err:
        parse_recipe(GROUPED.replace("index: layer", "index: Layer"), "launch.yaml")
    assert "launches.1.index" in str(err.value) and "\n" not in str(err.value)


def test_a_view_outside_its_buffer_is_refused_where_the_pointer_is_made():
    import torch

    from regen.recipe import tensor_pointer
    t = torch.zeros(10, dtype=torch.float32)
    assert tensor_pointer(BoundArg("tensor", "w", 3), t, "k") == t.data_ptr() + 12
    with pytest.raises(RuntimeError, match="offset 10 lies outside buffer 'w' of 10 elements"):
        tensor_pointer(BoundArg("tensor", "w", 10), t, "k")
