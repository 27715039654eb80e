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


class Family(Strict):
    """Targets that share one generation: the generator is shown the family, not the member, so
    a new GPU of a known family is a YAML file and no new kernel. Members differ in what is
    compiled (arch) and where it is verified (hardware), never in what the generator sees for
    their arch."""
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""


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
    family: Family | None = None    # default: a family of its own, named after the target

    @property
    def family_name(self) -> str:
        return self.family.name if self.family else self.name

    def arch_view(self) -> dict:
        """What the generator is shown about this target's arch: identical for every member of a
        family with this arch (checked when the targets load)."""
        return {name: _plain(getattr(self, name)) for name in ARCH_VIEW_FIELDS}

    def peak(self, key: str) -> Peak | None:
        return self.peaks.get(key)


# What the generator is shown of a target, and so what its generate key covers: per arch, and
# for the whole family. regen.keys reads these to say what a change to a target field causes.
ARCH_VIEW_FIELDS = ("arch", "limits", "features", "taxonomy")
FAMILY_VIEW_FIELDS = ("vendor", "language", "notes")
# the fields every member of a family shares (the compile toolchain too: one source, one dialect)
FAMILY_FIELDS = (*FAMILY_VIEW_FIELDS, "toolchain")


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return dict(value)
    return value.model_dump() if hasattr(value, "model_dump") else value


def generation_view(members: list[Target]) -> dict:
    """What a generator is shown for a family (and so what the generate key covers): the family's
    name and description, what all members share, and one section per arch. A member whose arch
    the family already has changes nothing here, so it needs no generation of its own."""
    first = members[0]
    family = first.family
    description = family.description if family and family.description else first.description
    archs = {}
    for m in members:
        archs.setdefault(m.arch, m.arch_view())
    return {"family": first.family_name, "description": description,
            **{name: getattr(first, name) for name in FAMILY_VIEW_FIELDS},
            "archs": [archs[a] for a in sorted(archs)]}


def check_family(members: list[Target], files: dict[str, str]) -> None:
    """Members of one family agree on what the generator sees; a clear error names the first
    field where they do not."""
    first = members[0]
    for m in members[1:]:
        for name in FAMILY_FIELDS:
            if getattr(m, name) != getattr(first, name):
                raise InputError(f"family {m.family_name!r}: {name} differs from {first.name}'s "
                                 "(members share one generation, so they must agree on it)",
                                 file=files[m.name], field=name)
        if m.family != first.family:
            raise InputError(f"family {m.family_name!r}: description differs from {first.name}'s",
                             file=files[m.name], field="family.description")
        same_arch = next((o for o in members if o.arch == m.arch and o is not m), None)
        if same_arch is not None and m.arch_view() != same_arch.arch_view():
            view, other = m.arch_view(), same_arch.arch_view()
            name = next(k for k in view if view[k] != other[k])
            raise InputError(f"family {m.family_name!r}: {name} differs from {same_arch.name}'s, "
                             f"which has the same arch {m.arch} (the generator is shown one view "
                             "per arch: move the field into the family's base file, or give this "
                             "target a family of its own)", file=files[m.name], field=name)
    if len(members) > 1 and not (first.family and first.family.description):
        raise InputError(f"family {first.family_name!r} has {len(members)} members and no "
                         "description (the generator is shown the family's, not a member's)",
                         file=files[first.name], field="family.description")


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
