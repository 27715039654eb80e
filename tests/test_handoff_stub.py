"""`regen handoff` on a node with nothing cached writes a stub: it must compile as written with the
column's real toolchain (g++ for cpu, NVRTC for NVIDIA, clang-22 for AMD), so that a person starts
from code that builds; the CUDA stub once included <stdint.h>, which NVRTC does not have."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import make_project, regen
from regen.artifact import SOURCE_NAMES
from regen.compile import compile_source
from regen.dtypes import short
from regen.project import Project

# An int64 input (cross_entropy's targets), float params (layernorm's eps), four shape symbols (rope).
KERNELS = ("cross_entropy", "layernorm", "rope")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("stubs") / "proj", kernels=KERNELS,
                        targets=("cpu", "h200", "mi350"))


@pytest.mark.parametrize("target", ["cpu", "h200", "mi350"])
def test_every_columns_stub_compiles_with_its_real_toolchain(project, tmp_path, target):
    proj = Project(project)
    tgt = proj.target(target)
    for kernel in KERNELS:
        folder = tmp_path / f"{kernel}@{target}"
        regen(project, "handoff", kernel, "--target", target, "--out", str(folder), check=True)
        source = (folder / SOURCE_NAMES[tgt.language]).read_text()
        assert "TODO: implement" in source  # the stub, not a cached implementation
        compiled = compile_source(source, tgt, use_cache=False)
        assert compiled.result.ok, f"{kernel}@{target} stub:\n{source}\n{compiled.result.log}"
        spec = proj.spec(kernel)
        recipe = yaml.safe_load((folder / "launch.yaml").read_text())
        assert [launch["kernel"] for launch in recipe["launches"]] == [f"{kernel}_{{dtype}}"]
        for dtype in spec.signature.dtypes:  # one entry point per dtype, as the recipe names it
            assert f"{kernel}_{short(dtype)}(" in source
