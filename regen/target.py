"""A hardware column: targets/<name>.yaml. Files named _*.yaml are abstract bases for `extends:`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InputError, pydantic_to_input_error
from .yamlio import read_mapping


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Peak(Strict):
    value: float = Field(gt=0)
    unit: str
    source: Literal["datasheet", "measured"]
    note: str = ""


class Toolchain(Strict):
    name: Literal["cxx", "nvrtc", "hip"]
    flags: list[str] = Field(default_factory=list)


class TaxonomyCell(Strict):
    id: str
    technique: str
    when: str = ""


class Hardware(Strict):
    """How to recognise this column's hardware on a machine (device name substrings)."""
    match: list[str] = Field(default_factory=list)


class Target(Strict):
    name: str
    description: str = ""
    vendor: Literal["nvidia", "amd", "host"]
    arch: str
    language: Literal["cuda", "hip", "cpp"]
    toolchain: Toolchain
    peaks: dict[str, Peak] = Field(default_factory=dict)  # memory_bandwidth, flops_<dtype>
    limits: dict[str, int | float | str] = Field(default_factory=dict)
    features: list[str] = Field(default_factory=list)
    notes: str = ""
    taxonomy: list[TaxonomyCell] = Field(default_factory=list)
    hardware: Hardware = Field(default_factory=Hardware)

    def prompt_view(self) -> dict:
        """What a generator is shown (and so what the generate key covers)."""
        return {
            "name": self.name, "description": self.description, "vendor": self.vendor,
            "arch": self.arch, "language": self.language, "limits": dict(self.limits),
            "features": list(self.features), "notes": self.notes,
            "taxonomy": [c.model_dump() for c in self.taxonomy],
        }

    def peak(self, key: str) -> Peak | None:
        return self.peaks.get(key)


def _merge(base: dict, child: dict) -> dict:
    out = dict(base)
    for k, v in child.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _raw(path: Path, seen: tuple[str, ...]) -> dict:
    data = read_mapping(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str):
        raise InputError("expected the name of another target file", file=str(path), field="extends")
    if parent in seen:
        raise InputError(f"extends cycle: {' -> '.join([*seen, parent])}", file=str(path),
                         field="extends")
    ppath = path.parent / f"{parent}.yaml"
    if not ppath.exists():
        raise InputError(f"extends {parent!r}, but {ppath} does not exist", file=str(path),
                         field="extends")
    return _merge(_raw(ppath, (*seen, parent)), data)


def load_target(path: Path) -> Target:
    data = _raw(path, (path.stem,))
    data.setdefault("name", path.stem)
    try:
        target = Target.model_validate(data)
    except ValidationError as exc:
        raise pydantic_to_input_error(exc, str(path)) from None
    if target.name != path.stem:
        raise InputError(f"expected name {path.stem!r} (the file name), got {target.name!r}",
                         file=str(path), field="name")
    return target
