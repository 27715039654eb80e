"""The technique grid (taxonomy/, regen/taxonomy.py, `regen taxonomy`): the committed grid loads,
bad grid files are clear input errors, a cell's level comes from its unit test's cached solution,
its verification and its disassembly, and a solution without its proof fails the cell."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from regen.errors import InputError
from regen.generators.parse import parse_cell
from regen.project import Project
from regen.prompt import build_prompt
from regen.store import Store
from regen.taxonomy import evaluate, load_grid, proof_count, proof_match

ROOT = Path(__file__).resolve().parent.parent

ROWS = "rows:\n  - {id: simd, title: SIMD}\n  - {id: threads, title: threads}\n"


def _cli(root: Path, *argv: str, local_cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "regen.cli", "--root", str(root), *argv],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "REGEN_LOCAL_CACHE": str(local_cache)})


def _project_with_grid(tmp_path: Path, columns: dict[str, str], rows: str = ROWS) -> Path:
    """A project that reads this repository's specs, oracles, targets and cache (never writing
    them) with a grid of the test's own."""
    root = tmp_path / "p"
    root.mkdir()
    for name in ("specs", "oracles", "targets", "cache"):
        (root / name).symlink_to(ROOT / name)
    (root / "taxonomy").mkdir()
    (root / "taxonomy" / "rows.yaml").write_text(rows)
    for name, text in columns.items():
        (root / "taxonomy" / f"{name}.yaml").write_text(text)
    return root


def _cpu_column(proof: str, unit_test: str = "tx_cpu_simd", users: str = "[]") -> str:
    return f"""column: cpu
title: host
archs: [x86_64]
cells:
  - id: cpu.simd
    row: simd
    title: packed SIMD
    description: vectorise the loop
    unit_test: {unit_test}
    proof: {{sass: '{proof}'}}
    users: {users}
"""


def test_the_committed_grid_loads_and_every_column_serves_a_target():
    grid = load_grid(ROOT)
    project = Project(ROOT)
    assert set(grid.columns) == {"sm_80", "sm_90a", "sm_100a", "gfx942", "gfx950", "cpu"}
    archs = {t.arch for t in project.targets.values()}
    for column in grid.columns.values():
        assert set(column.archs) <= archs, column.column
        for cell in column.cells:
            if cell.unit_test:
                assert cell.unit_test in project.kernel_names(), cell.id
    h200 = grid.column_for(project.target("h200"))
    rows = {c.row for c in h200.cells}
    # the rows the issue asks of sm_90a
    assert {"vector_access", "smem_tiling", "register_tiling", "async_copy", "bulk_copy",
            "matrix_core", "warp_specialisation", "persistent", "split_k", "low_precision",
            "epilogue"} <= rows


@pytest.mark.parametrize("column,message,field", [
    (_cpu_column("x").replace("row: simd", "row: vectorise"), "unknown row 'vectorise'",
     "cells[0].row"),
    (_cpu_column("(unclosed"), "not a regular expression", "cells.0.proof.sass"),
    (_cpu_column("x").replace("{sass: 'x'}", "{sass: 'x', metric: ipc, at_least: 1}"),
     "exactly one of", "cells.0.proof"),
    (_cpu_column("x").replace("id: cpu.simd", "id: simd"), "should match pattern", "cells.0.id"),
    (_cpu_column("x").replace("column: cpu", "column: host"), "expected column 'cpu'", "column"),
])
def test_a_bad_grid_file_is_an_input_error_naming_file_and_field(tmp_path, column, message, field):
    root = _project_with_grid(tmp_path, {"cpu": column})
    with pytest.raises(InputError) as err:
        load_grid(root)
    assert err.value.file.endswith("taxonomy/cpu.yaml")
    assert message in str(err.value) and err.value.field == field


def test_a_cell_naming_a_missing_unit_test_is_refused_by_the_command(tmp_path):
    root = _project_with_grid(tmp_path, {"cpu": _cpu_column("mulps", unit_test="tx_nothing")})
    done = _cli(root, "taxonomy", "-t", "cpu", "--declared-users", local_cache=tmp_path / "lc")
    assert done.returncode == 2, done.stderr
    assert "taxonomy/cpu.yaml [cells[0].unit_test]: unit test 'tx_nothing': no " \
           "specs/tx_nothing.yaml" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_target_without_a_column_is_an_input_error(tmp_path):
    root = _project_with_grid(tmp_path, {"cpu": _cpu_column("mulps")})
    done = _cli(root, "taxonomy", "-t", "h200", local_cache=tmp_path / "lc")
    assert done.returncode == 2 and "no column holds h200's arch sm_90a" in done.stderr


def test_proof_match_returns_the_instruction_and_ignores_never_executed_placeholders():
    sass = ("        Function : k\n"
            "        /*0600*/              @!PT LDS RZ, [RZ] ;             /* 0x00000000ffff7984 */\n"
            "        /*0740*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;"
            "  /* 0x00e00000081879f0 */\n")
    assert proof_match(r"\bLDS\b", sass) is None
    assert proof_match(r"\bHGMMA\.", sass) == "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24, gsb0 ;"


NO_HOST_TOOLS = "needs g++ and objdump: the cpu cells' solutions are built and disassembled here"

@pytest.fixture(scope="module")
def cells_verified_here(tmp_path_factory):
    """A copy of this project whose cpu cells' unit-test solutions are verified on the machine
    running the tests (a record made elsewhere names other hardware, so it does not count here)."""
    if shutil.which("g++") is None or shutil.which("objdump") is None:
        pytest.skip(NO_HOST_TOOLS)
    root = tmp_path_factory.mktemp("cells") / "p"
    for name in ("specs", "oracles", "targets", "cache", "taxonomy"):
        shutil.copytree(ROOT / name, root / name)
    done = _cli(root, "verify", "tx_cpu_simd", "tx_cpu_threads", "tx_cpu_cache_blocking", "-t", "cpu",
                "--seeds", "1", local_cache=root.parent / "lc")
    assert done.returncode == 0, done.stdout + done.stderr
    return root


def test_verified_cpu_solutions_whose_disassembly_shows_the_proof_are_proven(cells_verified_here,
                                                                             monkeypatch):
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(cells_verified_here.parent / "lc"))
    project = Project(cells_verified_here)
    grid = load_grid(cells_verified_here)
    states = {s.cell.id: s for s in evaluate(project, Store(project.cache_dir), grid,
                                             [project.target("cpu")], users=False)}
    assert states["cpu.simd"].level == "proven"
    assert states["cpu.simd"].evidence.split()[0] in ("mulps", "addps", "vmulps", "vaddps")
    assert states["cpu.threads"].level == "proven" and "GOMP_parallel" in states["cpu.threads"].evidence
    # a proof of several patterns: the first line of each, in order
    blocking = states["cpu.cache_blocking"]
    assert blocking.level == "proven"
    assert [part.split()[0] for part in blocking.evidence.split(" | ")] == \
        ["unpcklps", "unpckhps", "movlhps", "movhlps"]


def test_a_metric_proof_is_not_read_from_a_binary(cells_verified_here, tmp_path):
    """A verified solution whose proof is a profiler metric stops at solved-and-verified: nothing
    here can measure it, and the note says so."""
    root = _project_with_grid(tmp_path, {"cpu": _cpu_column("x").replace(
        "{sass: 'x'}", "{metric: l1d_miss_ratio_reduction, at_least: 2}")})
    for name in ("cache", "specs", "oracles", "targets"):
        (root / name).unlink()
        (root / name).symlink_to(cells_verified_here / name)
    done = _cli(root, "taxonomy", "-t", "cpu", "--declared-users", "--format", "json",
                local_cache=cells_verified_here.parent / "lc")
    assert done.returncode == 0, done.stderr
    cell, = json.loads(done.stdout)["cells"]
    assert cell["level"] == "solved-and-verified" and cell["proof_shown"] is None
    assert "needs a profiler run" in " ".join(cell["notes"])


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None,
                    reason=NO_HOST_TOOLS)
def test_a_solution_whose_disassembly_lacks_the_proof_fails_the_cell(tmp_path):
    root = _project_with_grid(tmp_path, {"cpu": _cpu_column(r"\bvfmadd231ps\b",
                                                            users="[gemm_int4]")})
    done = _cli(root, "taxonomy", "-t", "cpu", "--declared-users", "--format", "json",
                local_cache=tmp_path / "lc")
    assert done.returncode == 1, done.stderr            # x86-64-v2 has no FMA: the proof is absent
    cell, = json.loads(done.stdout)["cells"]
    assert cell["level"] == "failed" and cell["proof_shown"] is False
    assert "does not match /\\bvfmadd231ps\\b/" in cell["notes"][0]
    # a declared user with no spec yet is named as such, not dropped
    assert cell["users"] == [{"kernel": "gemm_int4", "state": "no library kernel yet"}]


def test_the_command_prints_the_grid_as_text_markdown_and_json(cells_verified_here):
    root, lc = cells_verified_here, cells_verified_here.parent / "lc"
    text = _cli(root, "taxonomy", "-t", "cpu", "--declared-users", local_cache=lc)
    assert text.returncode == 0, text.stderr
    assert "cpu: column cpu" in text.stdout
    assert "cpu.simd" in text.stdout and "proven" in text.stdout and "3 proven" in text.stdout
    md = _cli(root, "taxonomy", "-t", "cpu", "--declared-users", "--format", "markdown",
              local_cache=lc)
    assert md.returncode == 0 and "| SIMD vectorisation | `cpu.simd` PROVEN |" in md.stdout
    js = json.loads(_cli(root, "taxonomy", "-t", "cpu", "--declared-users", "--format", "json",
                         local_cache=lc).stdout)
    assert js["targets"] == {"cpu": "cpu"}
    assert {c["id"]: c["level"] for c in js["cells"]} == {
        "cpu.simd": "proven", "cpu.cache_blocking": "proven", "cpu.threads": "proven"}


def test_the_h200_prompt_lists_the_arch_cells_with_unit_tests_and_proofs():
    project = Project(ROOT)
    spec, target = project.spec("rmsnorm"), project.target("h200")
    prompt = build_prompt(spec, target, view=project.generation_view(target),
                          cells=project.technique_cells(target))
    assert "Technique grid cells for this arch" in prompt
    assert "- sm90.wgmma (wgmma (warpgroup MMA from shared-memory descriptors)): as described above " \
           "[unit test `tx_wgmma_tile`; proof: disassembly matches /\\b[HQ]GMMA\\./]" in prompt
    # a cell the target's own taxonomy does not describe is described in full
    assert "- sm90.cp_async_pipeline (cp.async multistage pipeline): Copy global memory" in prompt
    # a first generation is not asked to name a cell; a refinement is
    assert "CELL:" not in prompt.split("# Request: ")[1]
    refine = build_prompt(spec, target, request_purpose="optimise",
                          view=project.generation_view(target), cells=project.technique_cells(target))
    assert "`CELL: <id>` (one of nv.vector_access, nv.warp_reduce, sm90.smem_tiling" in refine


def test_the_grid_does_not_change_any_generate_key():
    """The cells are advice shown to the generator, not part of what defines a kernel: every
    committed kernel's status is unaffected by the grid (checked against the same plan with the
    grid's cells dropped from the prompt, which never feeds a key)."""
    from regen import keys
    from regen.prompt import TEMPLATE_VERSION

    project = Project(ROOT)
    target = project.target("h200")
    spec = project.spec("rmsnorm")
    before = keys.key(keys.generate_components(spec, project.generation_view(target), {},
                                               TEMPLATE_VERSION))
    assert project.technique_cells(target)              # the grid is there ...
    after = keys.key(keys.generate_components(spec, project.generation_view(target), {},
                                              TEMPLATE_VERSION))
    assert before == after                              # ... and the view the key covers lacks it
    assert "Technique grid" not in json.dumps(project.generation_view(target))


@pytest.mark.parametrize("answer,cell", [
    ("```cpp\nx\n```\nNOTE: n\nCELL: sm90.wgmma\n", "sm90.wgmma"),
    ("NOTE: n\n**CELL:** `cpu.simd`\n", "cpu.simd"),
    ("NOTE: n\nCELL: none\n", ""),
    ("NOTE: n\nCELL: the wgmma one\n", ""),
    ("```cpp\n// CELL: sm90.tma\n```\nNOTE: n\n", ""),       # inside a code block: not the answer's
])
def test_parse_cell_reads_the_answers_cell_line_outside_code_blocks(answer, cell):
    assert parse_cell(answer) == cell


@pytest.mark.skipif(shutil.which("g++") is None or shutil.which("objdump") is None,
                    reason=NO_HOST_TOOLS)
def test_the_command_needs_no_torch(tmp_path):
    script = ("import contextlib, io, sys\nfrom regen.cli import main\n"
              "with contextlib.redirect_stdout(io.StringIO()):\n"
              "    try:\n        code = main(['taxonomy', '-t', 'cpu', '--declared-users'])\n"
              "    except SystemExit as exc:\n        code = exc.code\n"
              "print(code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "REGEN_LOCAL_CACHE": str(tmp_path / "lc")})
    assert done.stdout.split() == ["0", "False"], done.stderr


def test_a_proof_with_also_patterns_needs_every_one():
    from regen.taxonomy import Proof
    text = ("  1000:\tunpcklps %xmm1,%xmm0\n  1004:\tmovlhps %xmm2,%xmm3\n"
            "  1008:\tunpckhps %xmm1,%xmm4\n")
    proof = Proof(sass=r"\bunpcklps\b", also=[r"\bunpckhps\b", r"\bmovlhps\b"])
    assert proof.match(text) == "unpcklps %xmm1,%xmm0 | unpckhps %xmm1,%xmm4 | movlhps %xmm2,%xmm3"
    assert proof.label() == "/\\bunpcklps\\b/ and /\\bunpckhps\\b/ and /\\bmovlhps\\b/"
    missing = Proof(sass=r"\bunpcklps\b", also=[r"\bmovhlps\b"])
    assert missing.match(text) is None
    with pytest.raises(Exception, match="a metric proof has none"):
        Proof(metric="ipc", at_least=1, also=["x"])


def test_a_ratio_proof_counts_instruction_lines_and_needs_its_bound():
    from regen.taxonomy import Proof
    loop = "".join(f"  /*{i:04x}*/  FFMA R{i}, R1, R2, R{i} ;\n" for i in range(12))
    loads = "  /*0100*/  LDS.128 R4, [R0] ;\n  /*0110*/  LDS.128 R8, [R0+0x10] ;\n"
    placeholder = "  /*0120*/  @!PT LDS RZ, [RZ] ;\n"      # never executes: not counted
    proof = Proof(sass=r"\bFFMA\b", per=r"\bLDS(\.\S+)?\s", at_least=4)
    assert proof.match(loop + loads + placeholder) == \
        "12 /\\bFFMA\\b/ per 2 /\\bLDS(\\.\\S+)?\\s/ = 6.0 >= 4"
    assert proof.match(loop[: loop.index("R6,")].rsplit("\n", 1)[0] + "\n" + loads) is None  # 6 / 2
    assert proof.match(loop) is None                       # no shared-memory load: no tiling
    assert proof.label() == "/\\bFFMA\\b/ per /\\bLDS(\\.\\S+)?\\s/ >= 4"
    with pytest.raises(Exception, match="needs `sass:` and `at_least: VALUE`"):
        Proof(sass="FFMA", per="LDS")
    with pytest.raises(Exception, match="add `per: REGEX`"):
        Proof(sass="FFMA", at_least=4)


def test_a_proof_sees_each_instruction_alone_and_never_across_lines():
    """The whole text is searched at once; a hit is kept only if its own line matches, so a
    pattern that could span two instructions (or would match an encoding) proves nothing."""
    text = ("        /*0010*/                   IADD3 R1, R1, 0x1, RZ ;     /* 0x0000000101017810 */\n"
            "                                                              /* 0x000fe20007ffe0ff */\n"
            "        /*0020*/                   FFMA R2, R3, R4, R2 ;       /* 0x0000000403027223 */\n")
    assert proof_match(r"RZ ;\s+FFMA", text) is None          # spans two instructions
    assert proof_match(r"0x000fe2", text) is None               # an encoding word, not code
    assert proof_match(r"^FFMA R2", text) == "FFMA R2, R3, R4, R2 ;"   # ^ is an instruction's start
    assert proof_count(r"\bR[0-9]\b", text) == 2               # lines, not matches


@pytest.mark.parametrize("line,shown", [
    ("  113c:\taddps  %xmm0,%xmm0", "addps %xmm0,%xmm0"),                                # objdump
    ("  113c:\t0f 58 c0             \taddps  %xmm0,%xmm0", "addps %xmm0,%xmm0"),          # with bytes
    ("\tglobal_load_dwordx4 v[8:11], v[8:9], off // 0000000019F0: DC5C8000 087F0008",
     "global_load_dwordx4 v[8:11], v[8:9], off"),                                        # llvm-objdump
])
def test_proof_evidence_is_the_instruction_without_address_or_encoding(line, shown):
    assert proof_match(r"addps|global_load_dwordx4", line) == shown


def test_compiled_h200_solutions_show_their_proofs_and_wait_for_the_hardware(tmp_path, monkeypatch):
    """The sm_90a unit tests are compiled here but verified only on an H200: unit-tested, proof
    shown (the SASS line), and the note says what is missing."""
    from regen.compile import toolchain_problem

    project = Project(ROOT)
    target = project.target("h200")
    if toolchain_problem(target):
        pytest.skip(toolchain_problem(target))
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(tmp_path / "lc"))
    states = {s.cell.id: s for s in evaluate(project, Store(project.cache_dir), load_grid(ROOT),
                                             [target], users=False)}
    expected = {"nv.vector_access": "LDG.E.128", "sm90.cp_async_pipeline": "LDGSTS",
                "sm90.tma": "UBLKCP", "sm90.wgmma": "HGMMA.64x64x16.F32.BF16",
                "sm90.warp_specialise": "USETMAXREG", "sm90.fp8": "QGMMA.64x64x32.F32.E4M3.E4M3",
                "sm90.epilogue": "STSM.16.M88.4", "nv.warp_reduce": "SHFL.BFLY",
                "sm90.smem_tiling": "LDS", "nv.split_k": "REDG.E.ADD.F32"}
    for cell, mnemonic in expected.items():
        st = states[cell]
        if st.proof_shown is None:
            pytest.skip(f"the proof check needs the disassembly, which is missing here: {st.notes}")
        opcode = next(w for w in st.evidence.split() if not w.startswith("@"))   # past a predicate
        assert st.proof_shown and opcode.startswith(mnemonic), (cell, st.evidence)
        if st.level != "proven":   # until the H200 records are imported
            assert st.level == "unit-tested" and any("needs H200" in n for n in st.notes)
    # register tiling is a ratio read from the binary: 512 FFMA over 32 LDS.128
    reg = states["sm90.register_tiling"]
    assert reg.proof_shown and reg.evidence.startswith("512 ") and "= 16.0 >= 4" in reg.evidence
    # persistent scheduling: the tile loop's stride, gridDim.x, read from constant bank 0
    assert "c[0x0][0xc]" in states["sm90.tile_schedule"].evidence
    # every sm_90a cell has its unit test now
    assert all(st.level != "described" for st in states.values()), \
        [c for c, st in states.items() if st.level == "described"]


def test_compiled_b200_solutions_show_their_proofs_and_wait_for_the_hardware(tmp_path, monkeypatch):
    """The sm_100a unit tests likewise: compiled here, their SASS showing each cell's proof (the
    block-scaled MMA with its scale factors' tensor-memory operand after the instruction
    descriptor), verified only on a B200."""
    from regen.compile import toolchain_problem

    project = Project(ROOT)
    target = project.target("b200")
    if toolchain_problem(target):
        pytest.skip(toolchain_problem(target))
    monkeypatch.setenv("REGEN_LOCAL_CACHE", str(tmp_path / "lc"))
    states = {s.cell.id: s for s in evaluate(project, Store(project.cache_dir), load_grid(ROOT),
                                             [target], users=False)}
    expected = {"nv.vector_access": "LDG.E.128", "nv.bulk_copy_pipeline": "UBLKCP",
                "sm100.tcgen05_mma": "UTCHMMA", "sm100.tensor_memory": "LDTM",
                "sm100.warp_specialise": "USETMAXREG", "nv.warp_reduce": "SHFL.BFLY",
                "nv.split_k": "REDG.E.ADD.F32", "sm100.block_scaled": "UTCQMMA",
                "sm100.epilogue": "UTMASTG", "sm100.cta_pair": "UTCHMMA.2CTA"}
    for cell, mnemonic in expected.items():
        st = states[cell]
        if st.proof_shown is None:
            pytest.skip(f"the proof check needs the disassembly, which is missing here: {st.notes}")
        opcode = next(w for w in st.evidence.split() if not w.startswith("@"))
        assert st.proof_shown and opcode.startswith(mnemonic), (cell, st.evidence)
        if st.level != "proven":
            assert st.level == "unit-tested" and any("needs B200" in n for n in st.notes)
    assert "tmem[" in states["sm100.block_scaled"].evidence.split("idesc[")[1]
    assert all(st.level != "described" for st in states.values()), \
        [c for c, st in states.items() if st.level == "described"]
