"""The prompt a generator is shown: spec + target knowledge + the artifact format contract.

One deterministic text (no timestamps, dicts sorted) in two parts:
  static prefix   everything about the kernel and the target; identical for the first request, every
                  repair and every refinement, so an LLM backend can mark it for prompt caching;
  request part    starts at the line `# Request: <purpose>`: what to do now, the previous candidate
                  and the feedback (compile log, failing case, profile figures).
`split_prompt()` cuts a prompt back into the two parts at that line.

Fields read (the generate key should cover them): spec name, summary, intent, signature,
invariants, tolerance, cases, profile (selector maps resolved for the target);
the target family's generation view; the component artifacts; TEMPLATE_VERSION.
Also read, and deliberately not in the generate key: the technique grid's cells for the family's
archs (taxonomy/, `regen taxonomy`). They are advice with a unit-tested example each, like the
cases shown for context: a new or better-proven cell does not make a verified kernel stale, it
informs the next generation or refinement. A refinement names the cell it applies on a `CELL:`
line, which the search tree records (regen/search.py).
"""

from __future__ import annotations

import re

from .dtypes import DTYPES, short
from .artifact import SOURCE_NAMES, Candidate, Request

# 2: the target part shows the family (shared notes, one section per arch), not one target
TEMPLATE_VERSION = "regen-prompt-2"

REQUEST_MARKER = "# Request: "

FENCE_TAGS = {"cuda": "cuda", "hip": "hip", "cpp": "cpp"}

_LANGUAGE_NAMES = {"cuda": "CUDA C++", "hip": "HIP C++", "cpp": "C++17"}

_COMPILE_NOTES = {
    "cuda": (
        "The source is compiled on its own by NVRTC for the target arch: device code only (no host "
        "functions that launch, no main, no <iostream>/<vector>), headers limited to what NVRTC and "
        "the CUDA toolkit provide (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h, cooperative_groups.h, "
        "cuda/std, cub). Every kernel named in launch.yaml is `extern \"C\" __global__`."),
    "hip": (
        "The source is compiled on its own by clang (-x hip --offload-arch=<arch> "
        "--cuda-device-only): device code only, include <hip/hip_runtime.h> (hip_fp16.h, "
        "hip_bf16.h as needed). Every kernel named in launch.yaml is `extern \"C\" __global__`."),
    "cpp": (
        "The source is compiled on its own into a shared library by the system C++ compiler. Every "
        "kernel named in launch.yaml is an `extern \"C\"` function returning void; regen calls it "
        "once per launch entry on the host, with pointers into buffers it allocated."),
}


def _element_ctype(dtype: str, language: str) -> str:
    if language == "cpp":
        if dtype in ("float16", "bfloat16"):
            return f"uint16_t ({dtype} bit pattern; convert through float explicitly)"
        if dtype.startswith("float8"):
            return f"uint8_t ({dtype} bit pattern)"
        if dtype == "bool":
            return "uint8_t (0 or 1)"
        return DTYPES[dtype][2]
    if language == "hip":
        if dtype == "bfloat16":
            return "__hip_bfloat16"
        if dtype.startswith("float8"):
            return f"uint8_t ({dtype} bit pattern)"
    return DTYPES[dtype][2]


def _num(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _dims(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def fence(text: str, tag: str = "") -> str:
    """A fenced block whose fence is longer than any backtick run inside the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{tag}\n{text.rstrip()}\n{ticks}"


# -- static prefix -------------------------------------------------------------------------------

def _stored(t) -> str:
    """What a storage buffer of a `format:` tensor holds."""
    if t.storage is None:
        return ""
    what = "element codes" if t.storage == "data" else "E8M0 block scales"
    return f" ({t.format} {what} of the logical {_dims(t.logical_shape)} tensor)"


def _signature(spec) -> list[str]:
    sig = spec.signature
    lines = ["## Signature",
             f"Each case runs with one dtype T from: {', '.join(sig.dtypes)}. "
             "Tensors are contiguous, row-major; shapes use symbols bound per case."]
    lines.append("Inputs:")
    for t in sig.inputs:
        desc = f" — {t.description.strip()}" if t.description.strip() else ""
        lines.append(f"- {t.name}: {t.dtype}{_dims(t.shape)}{_stored(t)}{desc}")
    lines.append("Outputs:")
    for t in sig.outputs:
        desc = f" — {t.description.strip()}" if t.description.strip() else ""
        inplace = (f" (in place: the same buffer as input {t.inplace_of}; read it, then overwrite it)"
                   if t.inplace_of else "")
        lines.append(f"- {t.name}: {t.dtype}{_dims(t.shape)}{_stored(t)}{inplace}{desc}")
    if sig.params:
        lines.append("Scalar parameters:")
        for p in sig.params:
            default = "" if p.default is None else f", default {_num(p.default)}"
            desc = f" — {p.description.strip()}" if p.description.strip() else ""
            lines.append(f"- {p.name}: {p.type}{default}{desc}")
    else:
        lines.append("Scalar parameters: none.")
    stored = sorted({t.format for t in sig.tensors if t.storage == "data"})
    if stored:
        from .formats import describe

        lines.append("Block-scaled formats: a tensor declared with a format arrives as two uint8 "
                     "buffers, `name` (packed element codes) and `name_scale` (E8M0 scales); its "
                     "logical shape is given with each.")
        lines += [f"- {describe(f)}" for f in stored]
    inplace = [t for t in sig.outputs if t.inplace_of]
    if not inplace:
        lines.append("Inputs must not be modified (they are checked after the run).")
    symbols = sorted(sig.symbols() - {p.name for p in sig.params})
    if symbols:
        lines.append(f"Shape symbols: {', '.join(symbols)}.")
    return lines


def _cases(spec) -> list[str]:
    default = spec.signature.dtypes[0]

    def line(case) -> str:
        parts = [f"{k}={v}" for k, v in case.sizes.items()]
        parts.append(f"dtype {case.dtype or default}")
        parts += [f"{k}={_num(v)}" for k, v in sorted(case.params.items())]
        if case.dist != "normal":
            parts.append(f"inputs {case.dist}")
        if case.tolerance is not None:
            parts += [f"{f} {_num(getattr(case.tolerance, f))}" for f in ("atol", "rtol")
                      if getattr(case.tolerance, f) is not None]
        name = f"{case.name}: " if case.name else ""
        return f"- {name}{', '.join(parts)}"

    lines = ["## Cases",
             "Correctness cases (every one must pass; edge shapes included on purpose):"]
    lines += [line(c) for c in spec.correctness_cases()]
    bench = spec.bench_cases()
    if bench:
        lines.append("Benchmark cases (timed; also checked):")
        lines += [line(c) for c in bench]
    lines.append("Inputs are drawn by the oracle (normal unless a distribution is named). Hidden "
                 "shapes and seeds are checked as well: handle every shape the signature allows, "
                 "do not specialise on the listed ones.")
    return lines


def _profile(spec, target) -> list[str]:
    from .keys import profile_for
    from .spec import select

    prof = spec.profile
    lines = ["## Performance expectations on this target"]
    if prof.bytes:
        lines.append(f"- Bytes that must move: {prof.bytes}")
    else:
        lines.append("- Bytes that must move: every input read once and every output written once.")
    if prof.flops:
        lines.append(f"- Floating-point operations: {prof.flops}")
    floor = select(prof.floor_fraction, target)
    if floor is not None:
        lines.append(f"- Reach at least {_num(floor)} of the physical floor (the time to move the "
                     "bytes at peak memory bandwidth, or do the flops at peak throughput).")
    plain = {k: v for k, v in prof.speedup.items() if not isinstance(v, dict)}
    for baseline, minimum in sorted({**plain, **prof.speedup_for(target, False)}.items()):
        lines.append(f"- Be at least {_num(minimum)}x as fast as {baseline} on the benchmark cases.")
    for baseline, minimum in sorted((profile_for(spec, target).get("geomean_speedup") or {}).items()):
        lines.append(f"- Be at least {_num(minimum)}x as fast as {baseline} in geometric mean over "
                     "the benchmark cases.")
    regs = select(prof.max_registers, target)
    if regs is not None:
        lines.append(f"- At most {regs} registers per thread.")
    spills = select(prof.max_spills, target)
    if spills is not None:
        lines.append(f"- At most {spills} bytes of register spills.")
    instrs = select(prof.instructions, target)
    if instrs:
        lines.append(f"- The compiled code must contain these instructions: {', '.join(instrs)}.")
    lines.append("Correctness comes first: a fast kernel that fails one case is discarded.")
    return lines


_ARCH_MACROS = {"cuda": "__CUDA_ARCH__ (e.g. `#if __CUDA_ARCH__ >= 1000`)",
                "hip": "the arch macros (e.g. `#if defined(__gfx950__)`)",
                "cpp": "preprocessor conditions"}


def _cells(arch: dict, cells: list) -> list[str]:
    """The technique grid's cells for one arch: cells the arch's taxonomy above already describes
    by the same id are referenced, the others described; each with the unit test that exercises
    it and the disassembly pattern that proves it."""
    known = {c["id"] for c in arch.get("taxonomy") or []}
    lines = ["Technique grid cells for this arch (`regen taxonomy`; each has a unit-test kernel, and "
             "regen checks the proof against the disassembly):"]
    for cell in cells:
        extra = []
        if cell.unit_test:
            extra.append(f"unit test `{cell.unit_test}`")
        if cell.proof is not None and cell.proof.sass is not None:
            extra.append(f"proof: disassembly matches {cell.proof.label()}")
        tail = f" [{'; '.join(extra)}]" if extra else ""
        if cell.id in known:
            lines.append(f"- {cell.id} ({cell.title}): as described above{tail}")
        else:
            when = f" (when {cell.applicability})" if cell.applicability else ""
            lines.append(f"- {cell.id} ({cell.title}): {' '.join(cell.description.split())}"
                         f"{when}{tail}")
    return lines


def _target(view: dict, cells: dict | None = None) -> list[str]:
    """The target family: what its members share, then one section per arch (with the technique
    grid's cells for that arch when `cells` maps it to some)."""
    archs = view["archs"]
    lines = [f"## Target family `{view['family']}`"]
    if view["description"].strip():
        lines.append(view["description"].strip())
    lines.append(f"Vendor {view['vendor']}, language {view['language']}, "
                 f"arch{'s' if len(archs) > 1 else ''} {', '.join(a['arch'] for a in archs)}.")
    if len(archs) > 1:
        lines.append("One source and one launch.yaml serve every arch below; each arch compiles it "
                     f"on its own. Put what must differ per arch in sections selected by "
                     f"{_ARCH_MACROS[view['language']]}; keep every launched symbol defined on "
                     "every arch.")
    if view["notes"].strip():
        lines.append("Notes:")
        lines.append(view["notes"].strip())
    for arch in archs:
        if len(archs) > 1:
            lines += ["", f"### Arch {arch['arch']}"]
        if arch["limits"]:
            lines.append("Limits: " + ", ".join(f"{k}={_num(v)}"
                                                for k, v in sorted(arch["limits"].items())))
        if arch["features"]:
            lines.append("Features: " + ", ".join(sorted(arch["features"])))
        if arch["taxonomy"]:
            lines.append("Techniques that apply on this arch (cite the id in your NOTE when you "
                         "use one):")
            for cell in arch["taxonomy"]:
                when = f" (when {cell['when']})" if cell.get("when") else ""
                lines.append(f"- {cell['id']}: {cell['technique']}{when}")
        if cells and cells.get(arch["arch"]):
            lines += _cells(arch, cells[arch["arch"]])
    return lines


def _components(components, language: str) -> list[str]:
    if not components:
        return []
    lines = ["## Components already implemented and verified for this target",
             "Reuse their code where it helps: copy what you need into your own single source file "
             "(your artifact is compiled on its own)."]
    for name, source, recipe in sorted(components, key=lambda c: c[0]):
        lines.append(f"### {name}")
        lines.append(fence(source, FENCE_TAGS[language]))
        lines.append(fence(recipe, "yaml"))
    return lines


def _example_recipe(spec, language: str) -> str:
    sig = spec.signature
    args = [t.name for t in sig.inputs]
    args += [t.name for t in sig.outputs if not t.inplace_of]
    symbols = sorted(sig.symbols() - {p.name for p in sig.params})
    args += symbols
    for p in sig.params:
        args.append(f'"float32:{p.name}"' if p.type == "float" else p.name)
    lines = ["launches:", f"  - kernel: {spec.name}_{{dtype}}"]
    if language in ("cuda", "hip"):
        first = symbols[0] if symbols else "1"
        lines.append(f'    grid: ["{first}", 1, 1]')
        lines.append("    block: [256, 1, 1]")
        lines.append("    shared_mem: 0")
    lines.append(f"    args: [{', '.join(args)}]")
    return "\n".join(lines)


def _contract(spec, target) -> list[str]:
    lang = target.language
    tag = FENCE_TAGS[lang]
    dtypes = spec.signature.dtypes
    symbol_list = ", ".join(f"{spec.name}_{short(d)}" for d in dtypes)
    ctypes = "; ".join(f"{d} ({short(d)}): {_element_ctype(d, lang)}" for d in dtypes)
    gpu = lang in ("cuda", "hip")
    lines = [
        "## Artifact format contract",
        f"An artifact is one {_LANGUAGE_NAMES[lang]} source file ({SOURCE_NAMES[lang]}) plus "
        "launch.yaml, a declarative recipe regen's own host code follows to call your kernels. No "
        "host code of yours runs. " + _COMPILE_NOTES[lang],
        "",
        "Answer with exactly:",
        f"1. one fenced block tagged ```{tag} holding the whole source file;",
        "2. one fenced block tagged ```yaml holding the whole launch.yaml;",
        "3. one line, outside the blocks, starting `NOTE:` that says in one line what this "
        "candidate does or changes (e.g. `NOTE: one pass per row, online max+sum, 4-wide vectors`).",
        "No other fenced blocks. Always give complete files, never a diff.",
        "",
        "launch.yaml:",
        "- `launches`: a list; for each case regen runs, in order, every entry whose `when` holds.",
        "- `kernel`: the extern \"C\" symbol. `{dtype}` in it is replaced by the case's short dtype "
        f"name, so define one symbol per dtype: {symbol_list}. Element types: {ctypes}.",
        "- `when` (optional): an expression over the shape symbols and parameters, e.g. "
        "\"N <= 8192\", to dispatch between variants declaratively. Some entry must apply to "
        "every case.",
    ]
    if gpu:
        lines += [
            "- `grid`, `block`: 1 to 3 dimensions, each an integer or expression.",
            "- `shared_mem`: dynamic shared memory in bytes (expression), default 0.",
        ]
    else:
        lines.append("- `grid`, `block`, `shared_mem` do not apply to this language: leave them out.")
    lines += [
        "- `args`: the kernel's parameters, in order. A tensor name (input, output, workspace) "
        "passes a pointer to its first element; anything else is an expression evaluated per case "
        "and passed as int64_t when it is an integer, float when it is a float, unless prefixed "
        "\"int32:\", \"int64:\", \"float32:\" or \"float64:\" (e.g. \"float32:eps\", \"int32:N\"). An "
        "in-place output is passed as its input's name.",
        "- `workspace` (optional): scratch buffers regen allocates, e.g. "
        "`{name: partial, dtype: float32, shape: [\"M\", \"ceil_div(N, 1024)\"], zero: true}`; their "
        "contents are garbage unless `zero: true`. Name them in `args` like tensors.",
    ]
    if lang == "cuda":
        lines.append(
            "- `tensor_maps` (optional): TMA descriptors regen encodes over a buffer for each "
            "launch, e.g. `{name: tma_a, tensor: a, dims: [K, M], strides: [K], box: [64, 128], "
            "swizzle: 128B}` (dims and box innermost first, strides in elements of dims 1.., "
            "optional l2_promotion none|64B|128B|256B and oob_fill zero|nan); naming one in `args` "
            "passes a `const __grid_constant__ CUtensorMap` (128 bytes; define "
            "`struct __align__(64) CUtensorMap { unsigned long long opaque[16]; };`) for "
            "cp.async.bulk.tensor. Byte strides must be multiples of 16: guard with `when`.")
    lines += [
        "- Expressions: integers, floats, + - * / // % ** << >> & |, comparisons, and the "
        "functions ceil_div, cdiv, min, max, abs, next_pow2, int, float, log2, sqrt, dsize(T); "
        "names are the shape symbols, the scalar parameters and T (the case's dtype).",
        "Outputs are filled with garbage before every run: write every element. "
        + ("Do not allocate device memory or keep state between calls." if gpu else
           "Do not keep state between calls or start threads other than OpenMP's."),
        "",
        "Example launch.yaml shape for this kernel (adapt it; it is not a design suggestion):",
        fence(_example_recipe(spec, lang), "yaml"),
    ]
    return lines


def static_prefix(spec, target, components=None, view: dict | None = None,
                  cells: dict | None = None) -> str:
    """The part of every prompt for this (spec, target family, components) that never changes.
    `view` is Project.generation_view(target) (default: a family of one); `target` selects the
    profile expectations; `cells` is Project.technique_cells(target) (arch -> grid cells)."""
    if view is None:
        from .target import generation_view

        view = generation_view([target])
    lang = target.language
    lines = [
        f"You write {_LANGUAGE_NAMES[lang]} kernels for regen. regen compiles your source, runs it "
        "in a separate process against a float64 PyTorch oracle on every case below (outputs "
        "poisoned before each run, inputs checked afterwards), times it on the benchmark cases and "
        "keeps it only if every check passes.",
        "",
        f"# Kernel `{spec.name}`: {spec.summary.strip()}",
        "",
        "## Intent",
        spec.intent.strip(),
        "",
        *_signature(spec),
    ]
    if spec.invariants:
        lines += ["", "## Invariants (checked on your outputs)"]
        lines += [f"- {inv.name}: {inv.description.strip()}" for inv in spec.invariants]
    lines += ["", "## Tolerances (allclose: |out - ref| <= atol + rtol * |ref|, compared in float64)"]
    for dtype, tol in sorted(spec.tolerance.items()):
        lines.append(f"- {dtype}: atol {_num(tol.atol)}, rtol {_num(tol.rtol)}")
    lines += ["", *_cases(spec), "", *_profile(spec, target), "", *_target(view, cells)]
    comp = _components(components, lang)
    if comp:
        lines += ["", *comp]
    lines += ["", *_contract(spec, target)]
    return "\n".join(lines).rstrip() + "\n"


# -- request part ---------------------------------------------------------------------------------

_INSTRUCTIONS = {
    "generate": (
        "Write the first implementation. Get every case right first (edge shapes, special values), "
        "then aim for the performance expectations."),
    "repair": (
        "The previous candidate below failed. Fix the problem the feedback describes and keep what "
        "works. Return the complete corrected artifact."),
    "optimise": (
        "The previous candidate below passes every case. Make it faster on this target, guided by "
        "the profile feedback: one focused change per step, named in the NOTE line. It must still "
        "pass every case. Return the complete artifact."),
}


def _previous(previous: Candidate, language: str) -> list[str]:
    lines = ["## Previous candidate"]
    if not previous.recipe.strip():
        lines.append("Its answer could not be read as an artifact; here it is as received:")
        lines.append(fence(previous.source, "text"))
        return lines
    if previous.note:
        lines.append(f"NOTE: {previous.note}")
    if previous.cell:
        lines.append(f"CELL: {previous.cell}")
    lines.append(fence(previous.source, FENCE_TAGS[language]))
    lines.append(fence(previous.recipe, "yaml"))
    return lines


def request_part(language: str, request_purpose: str = "generate",
                 previous: Candidate | None = None, feedback: str | None = None,
                 cells: tuple[str, ...] = ()) -> str:
    """What to do now. A refinement ("optimise") with grid cells to choose from is asked to name
    the one it applies on a `CELL:` line."""
    if request_purpose not in _INSTRUCTIONS:
        raise ValueError(f"unknown request purpose {request_purpose!r}; "
                         f"expected one of {sorted(_INSTRUCTIONS)}")
    lines = [f"{REQUEST_MARKER}{request_purpose}", "", _INSTRUCTIONS[request_purpose]]
    naming = request_purpose == "optimise" and bool(cells)
    if naming:
        lines.append("Name the technique grid cell this change applies on a line `CELL: <id>` "
                     f"(one of {', '.join(cells)}), or `CELL: none` if no cell fits.")
    if previous is not None:
        lines += ["", *_previous(previous, language)]
    if feedback:
        lines += ["", "## Feedback", feedback.strip()]
    lines += ["", f"Answer in the format of the artifact format contract: one ```{FENCE_TAGS[language]} "
              "block, one ```yaml block, one NOTE: line" + (", one CELL: line." if naming else ".")]
    return "\n".join(lines) + "\n"


def build_prompt(spec, target, components=None, request_purpose: str = "generate",
                 previous: Candidate | None = None, feedback: str | None = None,
                 view: dict | None = None, cells: dict | None = None) -> str:
    """The exact text a generator is shown for one request."""
    return (static_prefix(spec, target, components, view, cells) + "\n"
            + request_part(target.language, request_purpose, previous, feedback,
                           cell_ids(cells)))


def cell_ids(cells: dict | None) -> tuple[str, ...]:
    """Every grid cell id of the family's archs, in order, once."""
    out: list[str] = []
    for arch in sorted(cells or {}):
        out += [c.id for c in cells[arch] if c.id not in out]
    return tuple(out)


def split_prompt(prompt: str) -> tuple[str, str]:
    """(static prefix, request part); the prefix is empty when the prompt has no request marker."""
    at = prompt.find("\n" + REQUEST_MARKER)
    if at < 0:
        return "", prompt
    return prompt[:at + 1], prompt[at + 1:]


def make_request_factory(spec, target, components=None, view: dict | None = None,
                         cells: dict | None = None):
    """request_factory(purpose, previous, feedback) -> Request, as regen.search.search() wants."""

    def factory(purpose: str, previous: Candidate | None = None, feedback: str | None = None):
        return Request(kernel=spec.name, target=target.name, language=target.language,
                       prompt=build_prompt(spec, target, components, purpose, previous,
                                           feedback, view, cells),
                       previous=previous, feedback=feedback, purpose=purpose,
                       cells=cell_ids(cells))

    return factory
