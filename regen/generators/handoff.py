"""The handoff generator: a person is the generator.

`regen handoff KERNEL --target T` writes a task folder with the exact prompt a generator would get,
a stub with the right signature, and the command that checks it; `regen accept DIR` compiles,
verifies and stores what the person wrote, with provenance `handoff`.
"""

from __future__ import annotations

import datetime as _dt
import getpass
import json
import subprocess
from pathlib import Path

from ..dtypes import DTYPES, short
from ..errors import InputError
from ..artifact import SOURCE_NAMES

_CUDA_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half"}
_HIP_TYPES = {"bfloat16": "__hip_bfloat16", "float16": "__half"}


def _ctype(dtype: str, language: str) -> str:
    if language == "cpp":
        if dtype in ("bfloat16", "float16"):
            return "uint16_t"
        return DTYPES[dtype][2]
    table = _CUDA_TYPES if language == "cuda" else _HIP_TYPES
    return table.get(dtype, DTYPES[dtype][2])


def stub(spec, target) -> tuple[str, str]:
    """A source stub (one entry point per dtype, right parameter list) and a matching launch.yaml."""
    lang = target.language
    sig = spec.signature
    syms = sorted(sig.symbols() - {p.name for p in sig.params})
    lines = []
    if lang == "cuda":
        lines += ["#include <cuda_bf16.h>", "#include <cuda_fp16.h>", "#include <stdint.h>", ""]
    elif lang == "hip":
        lines += ["#include <hip/hip_runtime.h>", "#include <hip/hip_bf16.h>",
                  "#include <hip/hip_fp16.h>", ""]
    else:
        lines += ["#include <cstdint>", "#include <cmath>", ""]
    qual = 'extern "C" __global__ void' if lang in ("cuda", "hip") else 'extern "C" void'
    for dtype in sig.dtypes:
        params = []
        for t in sig.inputs:
            d = dtype if t.dtype == "T" else t.dtype
            params.append(f"const {_ctype(d, lang)}* __restrict__ {t.name}")
        for t in sig.outputs:
            d = dtype if t.dtype == "T" else t.dtype
            params.append(f"{_ctype(d, lang)}* __restrict__ {t.name}")
        params += [f"int64_t {s}" for s in syms]
        params += [f"{'float' if p.type == 'float' else 'int64_t'} {p.name}" for p in sig.params]
        lines.append(f"{qual} {spec.name}_{short(dtype)}({', '.join(params)}) {{")
        lines.append("  // TODO: implement (see prompt.md)")
        lines.append("}")
        lines.append("")
    args = [t.name for t in sig.inputs] + [t.name for t in sig.outputs] + syms + \
        [f"float32:{p.name}" if p.type == "float" else p.name for p in sig.params]
    recipe = ["launches:", f"  - kernel: {spec.name}_{{dtype}}"]
    if lang in ("cuda", "hip"):
        first = syms[0] if syms else "1"
        recipe += [f"    grid: [\"{first}\", 1, 1]", "    block: [256, 1, 1]", "    shared_mem: 0"]
    recipe.append(f"    args: [{', '.join(args)}]")
    return "\n".join(lines), "\n".join(recipe) + "\n"


def _author() -> str:
    try:
        out = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or getpass.getuser()


def write_task(folder: Path, spec, target, prompt: str, generate_components: dict,
               generate_key: str, existing: tuple[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    src_name = SOURCE_NAMES[target.language]
    source, recipe = existing or stub(spec, target)
    (folder / "prompt.md").write_text(prompt)
    if not (folder / src_name).exists():
        (folder / src_name).write_text(source)
    if not (folder / "launch.yaml").exists():
        (folder / "launch.yaml").write_text(recipe)
    (folder / "task.json").write_text(json.dumps({
        "kernel": spec.name, "target": target.name, "language": target.language,
        "generate_key": generate_key, "generate": generate_components}, indent=1, sort_keys=True))
    (folder / "README.md").write_text(
        f"# Handoff: {spec.name} for {target.name}\n\n"
        f"Write `{src_name}` and `launch.yaml` as prompt.md asks (it is the exact prompt a generator "
        f"gets). Then check and store it:\n\n    regen accept {folder}\n\n"
        "accept compiles it, verifies it against the oracle where the hardware is present, and "
        "stores it in cache/ with provenance `handoff` (hand-written).\n")
    return folder


def read_task(folder: Path, author: str | None = None) -> dict:
    task_path = folder / "task.json"
    try:
        task = json.loads(task_path.read_text())
    except FileNotFoundError:
        raise InputError("not a handoff folder (no task.json); create one with `regen handoff "
                         "KERNEL --target T`", file=str(task_path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"invalid JSON: {exc.msg}", file=str(task_path), line=exc.lineno) from None
    for field in ("kernel", "target", "language"):
        if field not in task:
            raise InputError(f"missing field {field!r}", file=str(task_path), field=field)
    src = folder / SOURCE_NAMES[task["language"]]
    rec = folder / "launch.yaml"
    for p in (src, rec):
        if not p.exists():
            raise InputError("missing: write it before accepting", file=str(p))
    task["source"] = src.read_text()
    task["recipe"] = rec.read_text()
    if "TODO: implement" in task["source"]:
        raise InputError("still the stub (contains 'TODO: implement')", file=str(src))
    task["provenance"] = {
        "generator": "handoff", "author": author or _author(), "accepted_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "handoff_generate_key": task.get("generate_key"),
    }
    return task
