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

# A buffer element's C type in each language's stub, where it differs from dtypes.DTYPES: the
# host sees 16- and 8-bit floats as raw bits; NVRTC has no C library headers (no <stdint.h>, so no
# int64_t: the NVIDIA notes ask for long long); Debian's ROCm 5.2 HIP headers have no fp8 type.
_TYPES = {
    "cpp": {"float16": "uint16_t", "bfloat16": "uint16_t", "float8_e4m3fn": "uint8_t",
            "float8_e5m2": "uint8_t"},
    "cuda": {"int64": "long long", "int32": "int", "int16": "short", "int8": "signed char",
             "uint8": "unsigned char"},
    "hip": {"bfloat16": "__hip_bfloat16", "float16": "__half", "float8_e4m3fn": "uint8_t",
            "float8_e5m2": "uint8_t"},
}
_INDEX = {"cpp": "int64_t", "cuda": "long long", "hip": "int64_t"}  # shape symbols, int params


def _ctype(dtype: str, language: str) -> str:
    return _TYPES[language].get(dtype, DTYPES[dtype][2])


def stub(spec, target) -> tuple[str, str]:
    """A source stub (one entry point per dtype, right parameter list) and a matching launch.yaml."""
    lang = target.language
    sig = spec.signature
    syms = sorted(sig.symbols() - {p.name for p in sig.params})
    lines = []
    index = _INDEX[lang]
    if lang == "cuda":
        fp8 = any(d.startswith("float8") for t in (*sig.inputs, *sig.outputs)
                  for d in (sig.dtypes if t.dtype == "T" else [t.dtype]))
        lines += ["#include <cuda_bf16.h>", "#include <cuda_fp16.h>",
                  *(["#include <cuda_fp8.h>"] if fp8 else []), ""]
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
        params += [f"{index} {s}" for s in syms]
        params += [f"{'float' if p.type == 'float' else index} {p.name}" for p in sig.params]
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
