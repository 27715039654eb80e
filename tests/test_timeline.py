"""The timeline (regen/timeline.py, `regen profile --timeline`): the instrumentation contract in a
launch recipe, the record layout, the instrumented build of the h200 decode megakernel under the
CUDA emulation (its %globaltimer and %smid), the uninstrumented build free of timeline code, and
the command end to end on the host column."""

from __future__ import annotations

import ctypes
import json
import struct
from pathlib import Path

import pytest
from conftest import REPO, SCALE_SPEC, make_project, regen, write_handoff

from regen import timeline as tl
from regen.errors import InputError
from regen.recipe import BoundArg, bind, parse_recipe

RECIPE = """\
launches:
  - kernel: k_{dtype}
    args: [x, y, timeline, timeline_slots, N]
timeline:
  buffer: timeline
  slots: "N + 1"
  ops: [load, store]
"""


def test_unprofiled_launches_pass_a_null_timeline_and_no_slots():
    recipe = parse_recipe(RECIPE)
    (plain,) = bind(recipe, {"N": 7, "T": "float32"}, {"x", "y"}, "float32")
    assert plain.args[2:4] == (BoundArg("int64", 0), BoundArg("int64", 0))
    (profiled,) = bind(recipe, {"N": 7, "T": "float32"}, {"x", "y", "timeline"}, "float32")
    assert profiled.args[2:4] == (BoundArg("tensor", "timeline"), BoundArg("int64", 8))


@pytest.mark.parametrize("text, field, message", [
    (RECIPE.replace("args: [x, y, timeline,", "args: [x, y,"), "timeline",
     "no launch passes 'timeline' as an argument"),
    (RECIPE + "workspace:\n  - {name: timeline, dtype: int64, shape: [4]}\n", "timeline",
     "is also a workspace"),
    (RECIPE.replace("ops: [load, store]", "ops: []"), "timeline.ops", "at least 1 item"),
    (RECIPE.replace('slots: "N + 1"', 'slots: "N +"'), None, "cannot parse expression"),
])
def test_a_bad_timeline_declaration_is_one_line_naming_the_field(text, field, message):
    with pytest.raises(InputError) as err:
        parse_recipe(text, "h/launch.yaml")
    line = str(err.value)
    assert "\n" not in line and line.startswith("h/launch.yaml") and message in line, line
    if field:
        assert field in line, line


def _record(sm, block, op, step, start, end) -> bytes:
    return struct.pack("<IIIIQQ", sm, block, op, step, start, end)


def test_records_decode_skipping_unused_slots_and_refusing_broken_ones():
    raw = _record(7, 0, 0, 0, 0, 0) + _record(3, 1, 1, 5, 1000, 4000) + _record(0, 0, 0, 2, 10, 20)
    events = tl.decode(raw, ["load", "store"])
    assert events == [tl.Event(3, 1, 1, 5, 1000, 4000), tl.Event(0, 0, 0, 2, 10, 20)]
    words = list(struct.unpack(f"<{len(raw) // 8}q", raw))
    assert tl.decode(words, ["load", "store"]) == events
    s = tl.summary(events, ["load", "store"])
    assert s["sms"] == 2 and s["span_us"] == pytest.approx(3.99) and s["ops"]["store"]["count"] == 1
    with pytest.raises(tl.TimelineError, match="op id 2, but the recipe's timeline.ops names 2"):
        tl.decode(_record(0, 0, 2, 0, 1, 2), ["load", "store"])
    with pytest.raises(tl.TimelineError, match="ends at 1 ns, before it starts at 5 ns"):
        tl.decode(_record(0, 0, 0, 0, 5, 1), ["load", "store"])
    back, ops, meta = tl.from_json(tl.to_json(events, ["load", "store"], {"kernel": "k"}))
    assert ops == ["load", "store"] and meta == {"kernel": "k"} and len(back) == 2
    assert [e.end - e.start for e in back] == [3000, 10]


# -- the h200 decode megakernel's instrumented build under the CUDA emulation ----------------------
FUSED = "llama_layer_decode"


def _stage_items(case) -> list[int]:
    """Items per stage of the megakernel (its kernel.cu header): qkv, attn, o_proj, gate_up, down."""
    s = case.sizes
    b, h, hkv, g, d, length, f = (s[k] for k in ("B", "H", "Hkv", "G", "D", "L", "F"))
    splits = min(-(-length // 32), max(1, -(-132 // (b * hkv))))
    return [-(-((hkv * g + 2 * hkv) * d) // 16), b * hkv * splits, -(-h // 16), -(-f // 8),
            -(-h // 16)]


def _step_items(case) -> tuple[list[int], int]:
    """Items per stage of the whole-step megakernel (its kernel.cu header and launch.yaml): as
    many whole rows of K as fill one slot (64 KB while B * M <= 17408), at most 64, for qkv,
    o_proj, gate_up, down; attention splits of L; and the lm_head's items."""
    s = case.sizes
    b, h, hkv, g, d, length, f, v = (s[k] for k in ("B", "H", "Hkv", "G", "D", "L", "F", "V"))
    assert 2 * b * max(h, hkv * g * d, f) + 4 * b * h <= 34816, "a case of the 64 KB slots"

    def items(n, k):
        return -(-n // min(64, max(1, 65536 // (2 * k))))

    splits = max(1, min(-(-length // 32), 132 // (b * hkv)))
    return ([items((hkv * g + 2 * hkv) * d, h), b * hkv * splits, items(h, hkv * g * d),
             items(2 * f, h), items(h, f)], items(v, h))


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory):
    from support import cuda_emulation
    from support.library import committed

    cuda_emulation.skip_unless_available()
    source, _ = committed(FUSED, "h200")
    assert "REGEN_TIMELINE" in source, "the committed megakernel records no timeline"
    folder = tmp_path_factory.mktemp("tl")
    return ctypes.CDLL(str(cuda_emulation.build(tl.instrumented(source), folder)))


@pytest.mark.parametrize("index", [0, 1, 2])
def test_instrumented_megakernel_records_every_item_once_and_still_matches(instrumented, index,
                                                                            tmp_path):
    """Under the emulation (blocks one after another) block 0 claims every item; its records
    must name each item of each stage exactly once, in stage order, each wait before the item
    that waited, with %globaltimer times that never run backwards; and the instrumented build's
    outputs still match the composed reference. The records are drawn as the command draws them."""
    from support import cuda_emulation
    from support.library import assert_matches, judged_oracle, oracle_case, spec

    s, o = spec(FUSED), judged_oracle(FUSED)
    case = s.correctness_cases()[index]
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    pristine = {k: v.clone() for k, v in inputs.items()}
    outputs, changed, ran, words = cuda_emulation.run(instrumented, FUSED, case, inputs,
                                                      repeat=2, rezero=False, timeline=True)
    assert not changed
    assert_matches(outputs, o.reference(pristine, view), s.case_tolerance(case), f"{ran}: ")
    ops = ["qkv", "attn", "o_proj", "gate_up", "down", "wait"]
    events = tl.decode(words.tolist(), ops)
    items = [e for e in events if e.op < 5]
    want = _stage_items(case)
    for stage, n in enumerate(want):
        assert sorted(e.step for e in items if e.op == stage) == list(range(n)), ops[stage]
    order = sorted(items, key=lambda e: e.start)
    assert [e.op for e in order] == sorted(e.op for e in order), "items ran out of stage order"
    assert all(e.sm == 0 and e.block == 0 for e in events)   # the first block does everything
    assert all(a.end <= b.start for a, b in zip(order, order[1:])), "one block's items overlap"
    png = tmp_path / "t.png"
    if tl.matplotlib_problem():
        with pytest.raises(tl.MissingMatplotlib, match="pip install 'regen\\[timeline\\]'"):
            tl.render(events, ops, str(png))
    else:
        tl.render(events, ops, str(png), "emulated")
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_verified_build_has_no_timeline_code_and_the_instrumented_one_reads_globaltimer():
    """What the judge verifies and times is the source compiled as it is: its SASS reads no
    %globaltimer; the instrumented build (REGEN_TIMELINE) does, and is another binary."""
    from support.library import committed, nvrtc_for_h200

    toolchain, target = nvrtc_for_h200()
    source, _ = committed(FUSED, "h200")
    plain = toolchain.compile(source, target)
    probe = toolchain.compile(tl.instrumented(source), target)
    assert plain.ok and probe.ok, plain.log[-2000:] + probe.log[-2000:]
    assert plain.binary != probe.binary
    if plain.disassembly is None:
        pytest.skip("the disassembly check needs cuobjdump and nvdisasm (the "
                    "nvidia-cuda-cuobjdump and -nvdisasm wheels scripts/setup.sh installs)")
    assert "GLOBALTIMER" not in plain.disassembly
    assert "GLOBALTIMER" in probe.disassembly


# -- the command on the host column: a kernel that records with the host clock ----------------------
TIMED_CPP = """\
#include <cstdint>
#include <ctime>
#ifdef REGEN_TIMELINE
static uint64_t now_ns() { timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return uint64_t(t.tv_sec) * 1000000000u + t.tv_nsec; }
#endif
extern "C" void scale_f32(const float* x, float* y, uint64_t* timeline, int64_t slots, int64_t M,
                          int64_t N, float alpha) {
  for (int64_t m = 0; m < M; ++m) {
#ifdef REGEN_TIMELINE
    const uint64_t t0 = now_ns();
#endif
    for (int64_t n = 0; n < N; ++n) y[m * N + n] = alpha * x[m * N + n];
#ifdef REGEN_TIMELINE
    if (timeline && m < slots) {
      uint32_t* r = reinterpret_cast<uint32_t*>(timeline + 4 * m);
      r[0] = 0; r[1] = 0; r[2] = m % 2; r[3] = uint32_t(m);
      uint64_t t1 = now_ns();
      timeline[4 * m + 2] = t0; timeline[4 * m + 3] = t1 > t0 ? t1 : t0 + 1;
    }
#endif
  }
}
"""
TIMED_RECIPE = """\
launches:
  - kernel: scale_{dtype}
    args: [x, y, timeline, timeline_slots, M, N, "float32:alpha"]
timeline: {buffer: timeline, slots: M, ops: [even_row, odd_row]}
"""


@pytest.fixture(scope="module")
def timed_project(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("prof") / "proj")
    (root / "specs" / "scale.yaml").write_text(SCALE_SPEC.replace(
        "  - {M: 3, N: 130}\n", "  - {M: 3, N: 130}\n  - {name: rows, M: 40, N: 1000, bench: true}\n"))
    folder = write_handoff(root / "h", "scale", "cpu", TIMED_CPP, TIMED_RECIPE, root)
    regen(root, "accept", str(folder), check=True)
    return root


def test_profile_runs_the_instrumented_build_in_the_judge_and_writes_json_and_chart(timed_project,
                                                                                   tmp_path):
    out_json, out_png = tmp_path / "t.json", tmp_path / "t.png"
    args = ["profile", "scale", "-t", "cpu", "--json", str(out_json)]
    if not tl.matplotlib_problem():
        args += ["--timeline", str(out_png)]
    proc = regen(timed_project, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out_json.read_text())
    assert data["case"] == "rows" and data["outputs"]["ok"] is True
    assert data["ops"] == ["even_row", "odd_row"]
    assert sorted(e[3] for e in data["events"]) == list(range(40))   # one record per row
    assert data["summary"]["ops"]["odd_row"]["count"] == 20
    assert "40 intervals on 1 SMs" in proc.stdout
    if not tl.matplotlib_problem():
        assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        again = tmp_path / "again.png"
        proc = regen(timed_project, "profile", "--render", str(out_json), "--timeline", str(again))
        assert proc.returncode == 0 and again.is_file(), proc.stderr


def test_profile_runs_a_named_entry_or_a_candidate_folder_instead_of_the_current_one(
        timed_project, tmp_path):
    """--variant DIR profiles a candidate not in the cache (here: every row recorded as odd),
    --entry ID any entry of the kernel; the JSON says which artifact it was."""
    folder = tmp_path / "cand"
    folder.mkdir()
    (folder / "kernel.cpp").write_text(TIMED_CPP.replace("r[2] = m % 2;", "r[2] = 1;"))
    (folder / "launch.yaml").write_text(TIMED_RECIPE)
    out = tmp_path / "v.json"
    proc = regen(timed_project, "profile", "scale", "-t", "cpu", "--variant", str(folder),
                 "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["variant"] == str(folder) and "entry" not in data
    assert data["summary"]["ops"]["odd_row"]["count"] == 40 and data["outputs"]["ok"] is True

    current = json.loads((timed_project / "cache" / "scale" / "cpu" / "current.json").read_text())
    proc = regen(timed_project, "profile", "scale", "-t", "cpu", "--entry", current["entry"],
                 "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(out.read_text())["entry"] == current["entry"]

    proc = regen(timed_project, "profile", "scale", "-t", "cpu", "--entry", "0123456789abcdef",
                 "--json", str(out))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "no such cache entry of scale" in proc.stderr and current["entry"] in proc.stderr
    # an entry of another column's language (the committed rmsnorm's h200 CUDA source) is refused
    proc = regen(REPO, "profile", "rmsnorm", "-t", "cpu", "--entry",
                 json.loads((REPO / "cache" / "rmsnorm" / "h200" / "current.json").read_text())["entry"],
                 "--json", str(out))
    assert proc.returncode == 2 and "a cuda artifact" in proc.stderr and "cpu runs cpp" in proc.stderr, \
        proc.stderr
    (folder / "launch.yaml").unlink()
    proc = regen(timed_project, "profile", "scale", "-t", "cpu", "--variant", str(folder),
                 "--json", str(out))
    assert proc.returncode == 2 and "no launch.yaml there" in proc.stderr, proc.stderr


def test_profile_refuses_a_kernel_without_a_timeline_and_a_missing_case(tmp_path):
    from conftest import SCALE_CPP, SCALE_RECIPE

    root = make_project(tmp_path / "proj")
    folder = write_handoff(root / "h", "scale", "cpu", SCALE_CPP, SCALE_RECIPE, root)
    regen(root, "accept", str(folder), check=True)
    proc = regen(root, "profile", "scale", "-t", "cpu", "--json", str(tmp_path / "t.json"))
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "launch.yaml: no `timeline:`" in proc.stderr, proc.stderr
    proc = regen(root, "profile", "scale", "-t", "cpu")
    assert proc.returncode == 2 and "nothing to write" in proc.stderr


def test_profile_says_in_one_line_that_matplotlib_is_missing(timed_project, tmp_path):
    """With matplotlib hidden from the import system, --timeline is one line naming the extra to
    install, before anything runs."""
    import os
    import subprocess
    import sys
    code = ("import sys, importlib.util\n"
            "real = importlib.util.find_spec\n"
            "importlib.util.find_spec = lambda n, *a: None if n == 'matplotlib' else real(n, *a)\n"
            "from regen.cli import main\n"
            f"sys.exit(main(['--root', {str(timed_project)!r}, 'profile', 'scale', '-t', 'cpu', "
            f"'--timeline', {str(tmp_path / 'x.png')!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "REGEN_LOCAL_CACHE": str(tmp_path / "lc")})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs matplotlib" in lines[0] and "regen[timeline]" in lines[0]
    assert not (tmp_path / "x.png").exists()


def test_instrumented_step_megakernel_records_every_item_of_every_layer(tmp_path):
    """The whole-step megakernel's records under the emulation: each (layer, stage) item and
    each lm_head item once, layers in order, and the instrumented outputs still match."""
    from support import cuda_emulation
    from support.library import assert_matches, committed, judged_oracle, oracle_case, spec

    cuda_emulation.skip_unless_available()
    kernel = "llama_decode_step"
    source, recipe = committed(kernel, "h200")
    lib = ctypes.CDLL(str(cuda_emulation.build(tl.instrumented(source), tmp_path)))
    s, o = spec(kernel), judged_oracle(kernel)
    case = next(c for c in s.correctness_cases() if c.sizes["NL"] == 3)
    view = oracle_case(s, case)
    inputs = o.make_inputs(view, 0)
    pristine = {k: v.clone() for k, v in inputs.items()}
    outputs, changed, ran, words = cuda_emulation.run(lib, kernel, case, inputs, timeline=True)
    assert not changed
    assert_matches(outputs, o.reference(pristine, view), s.case_tolerance(case), f"{ran}: ")
    ops = recipe.timeline.ops
    assert ops == ["qkv", "attn", "o_proj", "gate_up", "down", "lm_head", "wait", "weights"]
    events = tl.decode(words.tolist(), ops)
    per_stage, lm_items = _step_items(case)
    for layer in range(case.sizes["NL"]):
        for stage, n in enumerate(per_stage):
            got = sorted(e.step & 0xFFFF for e in events if e.op == stage and e.step >> 16 == layer)
            assert got == list(range(n)), (layer, ops[stage])
    lm = sorted(e.step & 0xFFFF for e in events if e.op == 5)
    assert lm == list(range(lm_items))
    items = sorted((e for e in events if e.op < 6), key=lambda e: e.start)
    assert [e.step >> 16 for e in items if e.op < 5] == sorted(e.step >> 16 for e in items
                                                               if e.op < 5)


def test_staging_analysis_splits_each_blocks_first_item_of_a_stage_from_the_rest(tmp_path, capsys):
    """benchmarks/timeline_staging.py (the decode notes' staging and attention-phase figures): a
    block's first item of a (layer, stage) is the one that stages, later ones are not; waits are
    grouped by the stage waited for; the attention phase runs from the last qkv end."""
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("timeline_staging",
                                                  REPO / "benchmarks" / "timeline_staging.py")
    staging = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(staging)
    ops = ["qkv", "attn", "o_proj", "gate_up", "down", "lm_head", "wait", "weights"]
    us = 1000
    events = [  # sm, block, op, step = (layer << 16) | item, start, end (ns)
        [0, 0, 0, 0, 0, 6 * us], [0, 0, 0, 1, 6 * us, 7 * us], [0, 0, 0, 2, 7 * us, 8 * us],
        [0, 0, 1, 0, 9 * us, 19 * us],                          # attention, 1 us after qkv
        [0, 0, 6, 1, 19 * us, 23 * us],                         # a wait on counter 1 (attn)
        [0, 0, 0, (1 << 16) | 0, 30 * us, 35 * us],             # layer 1: a first item again
    ]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(
        {"kernel": "k", "device": "d", "case": "c", "ops": ops, "summary": {"span_us": 35.0},
         "events": events}).encode()))
    assert staging.main(str(path)) == 0
    out = capsys.readouterr().out
    qkv = next(line for line in out.splitlines() if line.startswith("qkv "))
    assert qkv.split()[1:5] == ["2", "5.00", "5.00", "11.0"], qkv   # first items: 6 us, 5 us
    assert qkv.split()[6] == "2" and qkv.split()[7] == "1.00", qkv   # two later items of 1 us
    assert "waiting for every attn item: 1 waits, 4.0 us per SM" in out, out
    assert "median 11.0 us; items start 1.0 us after it" in out, out
