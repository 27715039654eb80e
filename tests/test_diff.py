"""`regen diff`: a semantic diff of specs, oracles and targets between git revisions, and the plan it
implies, in a real temporary git repository holding real specs, oracles and targets."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, SCALE_CPP, SCALE_RECIPE, make_project, regen, write_handoff
from regen.cli import main


def git(root: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
                           "-c", "commit.gpgsign=false", *args], cwd=root, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def commit(root: Path, message: str = "change") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", message)


def init_repo(root: Path) -> Path:
    git(root, "init", "-q")
    commit(root, "base")
    return root


@pytest.fixture
def repo(tmp_path) -> Path:
    """specs/softmax.yaml, oracles/softmax.py, targets/cpu.yaml, committed."""
    return init_repo(make_project(tmp_path / "repo", kernels=("softmax",)))


def diff(root: Path, capsys, *args: str, fmt: str = "json"):
    """(exit code, output) of `regen diff --detailed-exitcode` run in-process."""
    capsys.readouterr()
    rc = main(["--root", str(root), "diff", *args, "--format", fmt, "--detailed-exitcode"])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if fmt == "json" else out)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def set_atol(path: Path, dtype: str, value: str) -> float:
    """Change one dtype's atol (whatever it is now); returns the old value."""
    import yaml

    old = float(yaml.safe_load(path.read_text())["tolerance"][dtype]["atol"])
    text, n = re.subn(rf"({dtype}:\s*\{{\s*atol:\s*)([^,}}]+)", lambda m: m.group(1) + value,
                      path.read_text(), count=1)
    assert n == 1
    path.write_text(text)
    return old


def intent_lines(path: Path) -> tuple[list[str], int]:
    lines = path.read_text().splitlines(keepends=True)
    return lines, lines.index("intent: |\n") + 1


def plan(report: dict) -> dict:
    return {f"{r['kernel']}@{r['target']}": r for r in report["plan"]}


def item(report: dict, kind: str, name: str) -> dict:
    return next(i for i in report["items"] if i["kind"] == kind and i["name"] == name)


def test_no_change_exits_zero(repo, capsys):
    rc, report = diff(repo, capsys)
    assert rc == 0 and report["changed"] is False
    assert plan(report)["softmax@cpu"]["action"] == "unchanged"
    assert report["items"] == []


def test_intent_edit_regenerates_with_a_sentence_diff(repo, capsys):
    spec = repo / "specs" / "softmax.yaml"
    lines, first = intent_lines(spec)
    lines[first] = "  Keep every row independent. " + lines[first].lstrip()
    spec.write_text("".join(lines))
    rc, md = diff(repo, capsys, fmt="markdown")
    assert rc == 2
    assert "### spec `softmax`" in md
    assert "- **intent** (4 words added) → _regenerate_" in md
    fenced = re.search(r"```diff\n(.*?)\n```", md, re.S).group(1).splitlines()
    assert fenced[0].startswith("@@ ")
    # one sentence per line: the new sentence is the only change, however the YAML was wrapped
    assert [line for line in fenced[1:] if line.startswith(("-", "+"))] == [
        "+Keep every row independent."]
    row = next(line for line in md.splitlines() if line.startswith("| `softmax@cpu`"))
    assert "**regenerate**" in row and "spec.intent changed (4 words)" in row
    assert "generate: no artifact in cache" in row        # the cache column: nothing committed yet

    rc, report = diff(repo, capsys)
    assert plan(report)["softmax@cpu"]["action"] == "regenerate"
    assert plan(report)["softmax@cpu"]["reasons"] == ["spec.intent changed (4 words)"]


def test_tolerance_only_edit_reverifies(repo, capsys):
    old = set_atol(repo / "specs" / "softmax.yaml", "float32", "3.0e-3")
    rc, report = diff(repo, capsys)
    assert rc == 2
    row = plan(report)["softmax@cpu"]
    assert row["action"] == "re-verify"
    assert row["reasons"] == ["tolerance changed (float32)"]
    changes = item(report, "spec", "softmax")["changes"]
    assert [(c["field"], c["text"], c["effect"]) for c in changes] == [
        ("tolerance.float32.atol", f"{old!r} → 0.003", "re-verify")]
    _, md = diff(repo, capsys, fmt="markdown")
    assert f"- **tolerance.float32.atol**: {old!r} → 0.003 → _re-verify_" in md
    assert "| `softmax@cpu` | **re-verify** | tolerance changed (float32) |" in md


def test_comments_formatting_and_reflowed_prose_are_no_change(repo, capsys):
    spec = repo / "specs" / "softmax.yaml"
    lines, first = intent_lines(spec)
    assert lines[first + 1].strip()                       # the intent's first two lines: one paragraph
    lines[first] = lines[first].rstrip("\n") + " " + lines[first + 1].lstrip()   # reflow
    del lines[first + 1]
    text = "# the softmax kernel\n" + "".join(lines).replace("tolerance:\n", "tolerance:   # per dtype\n")
    # flow style to block style, same numbers
    text, n = re.subn(r"float32: \{atol: ([^,]+), rtol: ([^}]+)\}",
                      lambda m: f"float32:\n    atol: {m.group(1)}\n    rtol: {m.group(2)}", text)
    assert n == 1
    spec.write_text(text)
    oracle = repo / "oracles" / "softmax.py"
    source = oracle.read_text()
    assert source.startswith('"""')
    source = '"""A different docstring."""\n# a comment\n' + source.split("\n", 1)[1]
    oracle.write_text(source.replace("def reference(", "# the reference\ndef reference(") + "# end\n")
    rc, report = diff(repo, capsys)
    assert rc == 0, report
    assert report["changed"] is False
    assert plan(report)["softmax@cpu"]["action"] == "unchanged"
    assert {(i["kind"], i["status"]) for i in report["items"]} == {("spec", "formatting"),
                                                                   ("oracle", "formatting")}
    _, text = diff(repo, capsys, fmt="text")
    assert "oracle softmax: formatting" in text and "the AST is unchanged" in text


def test_oracle_code_change_reverifies_and_shows_the_source_diff(repo, capsys):
    oracle = repo / "oracles" / "softmax.py"
    oracle.write_text(oracle.read_text() + "\n\ndef _helper():\n    return 1\n")
    rc, report = diff(repo, capsys)
    assert rc == 2
    row = plan(report)["softmax@cpu"]
    assert row["action"] == "re-verify" and row["reasons"][0].startswith("oracle changed")
    change = item(report, "oracle", "softmax")["changes"][0]
    assert change["effect"] == "re-verify"
    assert change["diff"][:2] == ["--- a/oracles/softmax.py", "+++ b/oracles/softmax.py"]
    assert "+def _helper():" in change["diff"]


def test_new_target_generates_for_every_kernel(tmp_path, capsys):
    root = init_repo(make_project(tmp_path / "repo", kernels=("softmax", "scale")))
    shutil.copy(REPO / "targets" / "cpu.yaml", root / "targets" / "cpu_v3.yaml")
    edit(root / "targets" / "cpu_v3.yaml", "x86-64-v2", "x86-64-v3")
    rc, report = diff(root, capsys)
    assert rc == 2
    actions = {k: (r["action"], r["reasons"]) for k, r in plan(report).items()}
    assert actions == {"scale@cpu": ("unchanged", []), "softmax@cpu": ("unchanged", []),
                       "scale@cpu_v3": ("generate", ["new target"]),
                       "softmax@cpu_v3": ("generate", ["new target"])}
    assert item(report, "target", "cpu_v3")["status"] == "added"


def test_target_field_changes_say_which_fields(repo, capsys):
    target = repo / "targets" / "cpu.yaml"
    edit(target, "flags: [", 'flags: ["-g0", ')
    rc, report = diff(repo, capsys)
    assert rc == 2
    assert plan(report)["softmax@cpu"]["action"] == "recompile"
    assert plan(report)["softmax@cpu"]["reasons"][0].startswith("toolchain changed")
    fields = [(c["field"], c["effect"]) for c in item(report, "target", "cpu")["changes"]]
    assert fields == [("toolchain.flags", "recompile")]

    text, n = re.subn(r"(memory_bandwidth: \{value: )([^,]+)", r"\g<1>9.9e10", target.read_text())
    assert n == 1
    target.write_text(text)
    rc, report = diff(repo, capsys)
    assert plan(report)["softmax@cpu"]["action"] == "re-verify"
    fields = {c["field"]: c["effect"] for c in item(report, "target", "cpu")["changes"]}
    assert fields == {"toolchain.flags": "recompile", "peaks.memory_bandwidth.value": "re-verify"}

    edit(target, "notes: |\n", "notes: |\n  Prefer plain loops.\n")
    rc, report = diff(repo, capsys)
    row = plan(report)["softmax@cpu"]
    assert row["action"] == "regenerate" and row["reasons"][0].startswith("target changed (notes")


def test_new_and_removed_spec_between_two_commits(repo, capsys):
    make_project(repo, kernels=("scale",))              # adds specs/scale.yaml + oracle
    git(repo, "rm", "-q", "specs/softmax.yaml", "oracles/softmax.py")
    commit(repo, "scale in, softmax out")
    rc, report = diff(repo, capsys, "HEAD~1", "HEAD")
    assert rc == 2
    assert report["base"].startswith("HEAD~1 (") and report["head"].startswith("HEAD (")
    assert plan(report)["scale@cpu"]["action"] == "generate"
    assert plan(report)["scale@cpu"]["reasons"] == ["new spec"]
    assert plan(report)["softmax@cpu"]["action"] == "removed"
    assert {(i["kind"], i["name"], i["status"]) for i in report["items"]} == {
        ("spec", "scale", "added"), ("oracle", "scale", "added"),
        ("spec", "softmax", "removed"), ("oracle", "softmax", "removed")}
    rc, _ = diff(repo, capsys)                           # the working tree is HEAD: no change
    assert rc == 0


def test_project_in_a_subfolder_of_the_repository(tmp_path, capsys):
    top = tmp_path / "repo"
    make_project(top / "kernels", kernels=("softmax",))
    (top / "README.md").write_text("other things\n")
    init_repo(top)
    set_atol(top / "kernels" / "specs" / "softmax.yaml", "float16", "5.0e-2")
    rc, report = diff(top / "kernels", capsys)
    assert rc == 2 and plan(report)["softmax@cpu"]["action"] == "re-verify"


def test_spec_invalid_at_base_is_reported_not_fatal(repo, capsys):
    spec = repo / "specs" / "softmax.yaml"
    good = spec.read_text()
    spec.write_text(good.replace("summary:", "sumary:"))
    commit(repo, "broken")
    spec.write_text(good)
    rc, report = diff(repo, capsys)
    assert rc == 2
    row = plan(report)["softmax@cpu"]
    assert row["action"] == "generate" and "did not load at HEAD" in row["reasons"][0]


def test_errors_are_clear(tmp_path, repo, capsys):
    plain = make_project(tmp_path / "plain", kernels=("softmax",))
    rc = main(["--root", str(plain), "diff"])
    assert rc == 2 and "not in a git repository" in capsys.readouterr().err
    rc = main(["--root", str(plain), "diff", "--detailed-exitcode"])
    assert rc == 1
    rc = main(["--root", str(repo), "diff", "no-such-rev"])
    assert rc == 2 and "'no-such-rev' is not a commit" in capsys.readouterr().err
    edit(repo / "specs" / "softmax.yaml", "summary:", "sumary:")   # invalid at HEAD: the user's to fix
    rc = main(["--root", str(repo), "diff"])
    err = capsys.readouterr().err
    assert rc == 2 and "softmax.yaml" in err and "summary" in err


@pytest.mark.slow
def test_cache_changes_and_the_cache_column(tmp_path, capsys):
    """A pull request that brings its cache entry along, then one that does not."""
    root = init_repo(make_project(tmp_path / "repo", kernels=("scale",)))
    folder = write_handoff(root / "handoffs" / "scale@cpu", "scale", "cpu", SCALE_CPP, SCALE_RECIPE,
                           root)
    regen(root, "accept", str(folder), check=True)
    (root / ".gitignore").write_text(".local-cache/\n")
    rc, report = diff(root, capsys)
    assert rc == 2                                        # only cache/ changed, and that is a change
    assert any(re.fullmatch(r"scale@cpu: new entry [0-9a-f]{16} by handoff.*", c)
               for c in report["cache"])
    assert any(c.startswith("scale@cpu: new record, verified on ") and c.endswith(": passed")
               for c in report["cache"])
    row = plan(report)["scale@cpu"]
    assert row["action"] == "unchanged" and row["cache_action"] == "up-to-date"
    commit(root, "scale@cpu accepted")

    edit(root / "specs" / "scale.yaml", "rtol: 1.0e-6", "rtol: 1.0e-5")
    rc, report = diff(root, capsys)
    row = plan(report)["scale@cpu"]
    assert (row["action"], row["cache_action"]) == ("re-verify", "re-verify")
    assert row["cache_reasons"] == ["tolerance changed (float32)"]
    _, md = diff(root, capsys, fmt="markdown")
    assert ("| `scale@cpu` | **re-verify** | tolerance changed (float32) | "
            "re-verify: tolerance changed (float32) |") in md


def test_text_and_markdown_list_only_what_changes_unless_all(tmp_path, capsys):
    root = init_repo(make_project(tmp_path / "repo", kernels=("softmax", "scale")))
    set_atol(root / "specs" / "softmax.yaml", "float32", "3.0e-3")
    rc, text = diff(root, capsys, fmt="text")
    assert rc == 2
    plan_lines = text.split("plan (", 1)[1].splitlines()[1:]
    assert plan_lines[0].startswith("  softmax@cpu: re-verify — tolerance changed (float32)")
    assert "scale@cpu" not in text and plan_lines[-1] == "  1 unchanged (--all lists them)"
    _, md = diff(root, capsys, fmt="markdown")
    assert "scale@cpu" not in md and "1 unchanged (--all lists them)." in md

    _, text = diff(root, capsys, "--all", fmt="text")
    assert "  scale@cpu: unchanged (cache in the working tree: generate — no artifact in cache)" in text
    assert "unchanged (--all" not in text
    _, md = diff(root, capsys, "--all", fmt="markdown")
    assert "<details><summary>1 unchanged</summary>" in md and "- `scale@cpu` — cache" in md
    _, report = diff(root, capsys)                        # json: every node, whatever the flag
    assert set(plan(report)) == {"softmax@cpu", "scale@cpu"}
