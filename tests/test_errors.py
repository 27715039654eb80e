"""Bad input gets one clear line naming the file, the field and what was expected; exit 2."""

from __future__ import annotations

from conftest import make_project, regen


def _fails_clearly(proc, *must_contain):
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    for text in must_contain:
        assert text in proc.stderr, (text, proc.stderr)


def test_unknown_target(project):
    _fails_clearly(regen(project, "status", "--target", "mi999"), "unknown target 'mi999'", "cpu")


def test_unknown_kernel(project):
    _fails_clearly(regen(project, "status", "nosuch"), "unknown kernel 'nosuch'", "scale")


def test_missing_oracle_function(project):
    oracle = project / "oracles" / "scale.py"
    oracle.write_text(oracle.read_text().replace("def reference(", "def reference_(", 1))
    _fails_clearly(regen(project, "status"), "oracles/scale.py", "reference", "missing function")


def test_missing_oracle_file(project):
    (project / "oracles" / "scale.py").unlink()
    _fails_clearly(regen(project, "status"), "oracles/scale.py", "not found")


def test_yaml_syntax_error_names_line(project):
    spec = project / "specs" / "scale.yaml"
    lines = spec.read_text().splitlines()
    lines[4] = "signature: [unclosed"
    spec.write_text("\n".join(lines) + "\n")
    _fails_clearly(regen(project, "status"), "specs/scale.yaml:", "YAML syntax error")


def test_wrong_dtype_name(project):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("dtypes: [float32]", "dtypes: [float33]"))
    _fails_clearly(regen(project, "status"), "specs/scale.yaml", "signature.dtypes",
                   "unknown dtype 'float33'")


def test_case_missing_symbol(project):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text().replace("- {M: 1, N: 1}", "- {M: 1}"))
    _fails_clearly(regen(project, "status"), "specs/scale.yaml", "['N']")


def test_unknown_field_is_named(project):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text() + "tolerence: {}\n")
    _fails_clearly(regen(project, "status"), "specs/scale.yaml", "tolerence")


def test_cyclic_components(tmp_path):
    root = make_project(tmp_path / "p")
    spec = (root / "specs" / "scale.yaml").read_text()
    (root / "specs" / "scale.yaml").write_text(spec + "components: [scale2]\n")
    (root / "specs" / "scale2.yaml").write_text(
        spec.replace("name: scale", "name: scale2") + "components: [scale]\n")
    (root / "oracles" / "scale2.py").write_text((root / "oracles" / "scale.py").read_text())
    _fails_clearly(regen(root, "status"), "components form a cycle", "scale", "scale2")


def test_unknown_component(project):
    spec = project / "specs" / "scale.yaml"
    spec.write_text(spec.read_text() + "components: [nothere]\n")
    _fails_clearly(regen(project, "status"), "unknown component 'nothere': no specs/nothere.yaml", "components")


def test_target_bad_field(project):
    t = project / "targets" / "cpu.yaml"
    t.write_text(t.read_text().replace("language: cpp", "language: fortran"))
    _fails_clearly(regen(project, "status"), "targets/cpu.yaml", "language")


def test_target_extends_missing(project):
    t = project / "targets" / "cpu.yaml"
    t.write_text("extends: _nothere\n" + t.read_text())
    _fails_clearly(regen(project, "status"), "targets/cpu.yaml", "extends", "_nothere")


def test_bad_recipe_expression_in_handoff(project, tmp_path):
    folder = tmp_path / "h"
    regen(project, "handoff", "scale", "--target", "cpu", "--out", str(folder), check=True)
    (folder / "kernel.cpp").write_text('extern "C" void scale_f32() {}\n')
    (folder / "launch.yaml").write_text("launches:\n  - kernel: scale_{dtype}\n    args: [__import__('os')]\n")
    proc = regen(project, "accept", str(folder))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "launch.yaml" in proc.stdout and "not allowed" in proc.stdout


def test_not_a_project(tmp_path):
    proc = regen(tmp_path, "status")
    _fails_clearly(proc, "no regen project here")
