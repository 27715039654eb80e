"""regen/generators/command.py: an external command as the generator, with real subprocesses."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from regen.generators import Candidate, GenerationError, Request
from regen.generators.command import CommandGenerator
from regen.generators.parse import ParseError

SOURCE = 'extern "C" void k_f32(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i]; }\n'
RECIPE = "launches:\n  - kernel: k_{dtype}\n    args: [x, y, n]\n"


def _script(tmp_path: Path, body: str) -> str:
    path = tmp_path / "agent.py"
    path.write_text("import json, os, sys\nfrom pathlib import Path\n" + textwrap.dedent(body))
    return f"{sys.executable} {path}"


def _request(purpose="generate", previous=None, feedback=None, prompt="PROMPT TEXT\nline 2\n"):
    return Request(kernel="copy", target="cpu", language="cpp", prompt=prompt,
                   previous=previous, feedback=feedback, purpose=purpose)


def test_command_writing_files_gets_the_prompt_on_stdin_and_in_the_task_dir(tmp_path):
    seen = tmp_path / "seen.json"
    cmd = _script(tmp_path, f"""
        task = Path(os.environ["REGEN_TASK_DIR"])
        stdin = sys.stdin.read()
        Path({str(seen)!r}).write_text(json.dumps({{
            "stdin": stdin, "file": (task / "prompt.md").read_text(), "task": str(task),
            "env": [os.environ[k] for k in ("REGEN_KERNEL", "REGEN_TARGET", "REGEN_LANGUAGE",
                                            "REGEN_PURPOSE", "REGEN_SOURCE_NAME")]}}))
        (task / "kernel.cpp").write_text({SOURCE!r})
        (task / "launch.yaml").write_text({RECIPE!r})
        (task / "NOTE").write_text("NOTE: plain copy loop\\n")
        """)
    cand = CommandGenerator(cmd, timeout=30).generate(_request())
    info = json.loads(seen.read_text())
    assert info["stdin"] == info["file"] == "PROMPT TEXT\nline 2\n"
    assert info["env"] == ["copy", "cpu", "cpp", "generate", "kernel.cpp"]
    assert cand.source == SOURCE and cand.recipe == RECIPE and cand.note == "plain copy loop"
    prov = cand.provenance
    assert prov["generator"] == "command" and prov["command"] == cmd
    assert prov["exit_code"] == 0 and 0 < prov["seconds"] < 30
    assert not Path(info["task"]).exists()  # cleaned up after a success


def test_command_printing_a_fenced_answer(tmp_path):
    answer = f"thinking...\n```cpp\n{SOURCE}```\n```yaml\n{RECIPE}```\nNOTE: from stdout\n"
    cmd = _script(tmp_path, f"sys.stdin.read()\nprint({answer!r})\n")
    cand = CommandGenerator(cmd, timeout=30).generate(_request())
    assert cand.source == SOURCE and cand.recipe == RECIPE and cand.note == "from stdout"


def test_repair_request_hands_over_feedback_and_the_previous_candidate(tmp_path):
    cmd = _script(tmp_path, f"""
        task = Path(os.environ["REGEN_TASK_DIR"])
        feedback = (task / "feedback.md").read_text()
        prev = (task / "previous" / "kernel.cpp").read_text()
        prev_note = (task / "previous" / "NOTE").read_text().strip()
        assert "launch.yaml" in os.listdir(task / "previous")
        (task / "kernel.cpp").write_text(prev.replace("long n", "long n /*fixed*/"))
        (task / "launch.yaml").write_text({RECIPE!r})
        print("NOTE: fixed after: " + feedback.splitlines()[0] + " / was: " + prev_note)
        """)
    previous = Candidate(source=SOURCE, recipe=RECIPE, note="first try")
    cand = CommandGenerator(cmd, timeout=30).generate(
        _request("repair", previous, "error: 'q' was not declared in this scope\nmore"))
    assert "/*fixed*/" in cand.source
    assert cand.note == "fixed after: error: 'q' was not declared in this scope / was: first try"


def test_nonzero_exit_is_a_generation_error_with_the_stderr_tail_and_no_key(tmp_path, monkeypatch):
    key = "sk-ant-command-test-SECRET-42"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    cmd = _script(tmp_path, """
        sys.stderr.write("x" * 5000 + "\\nagent: quota exhausted for key " + os.environ["ANTHROPIC_API_KEY"] + "\\n")
        sys.exit(3)
        """)
    with pytest.raises(GenerationError) as err:
        CommandGenerator(cmd, timeout=30).generate(_request())
    msg = str(err.value)
    assert "exited with status 3" in msg and "quota exhausted" in msg
    assert key not in msg and "<ANTHROPIC_API_KEY>" in msg
    assert len(msg) < 3000  # a tail, not the whole stderr


def test_timeout_kills_the_command_and_says_so(tmp_path):
    started, survived = tmp_path / "started", tmp_path / "survived"
    child = (f"import time; open({str(started)!r}, 'w'); time.sleep(3); "
             f"open({str(survived)!r}, 'w')")
    cmd = _script(tmp_path, f"""
        import subprocess, time
        subprocess.Popen([sys.executable, "-c", {child!r}])
        sys.stderr.write("working...\\n"); sys.stderr.flush()
        time.sleep(30)
        """)
    t0 = time.monotonic()
    with pytest.raises(GenerationError, match=r"timed out after 1 s"):
        CommandGenerator(cmd, timeout=1).generate(_request())
    assert time.monotonic() - t0 < 10
    if started.exists():   # the grandchild ran: it must have died with its process group
        time.sleep(3.5)
        assert not survived.exists()


@pytest.mark.parametrize("files, stdout, message", [
    ({"kernel.cpp": SOURCE}, "", "wrote kernel.cpp but no launch.yaml"),
    ({"kernel.cpp": SOURCE, "launch.yaml": "launches: [{kernel: k}]\n"}, "",
     r"launch.yaml is invalid: launches.0.args"),
    ({}, "I could not do it.", r"no fenced code block.*wrote no kernel.cpp"),
])
def test_unreadable_output_is_a_parse_error(tmp_path, files, stdout, message):
    cmd = _script(tmp_path, f"""
        task = Path(os.environ["REGEN_TASK_DIR"])
        for name, text in {files!r}.items():
            (task / name).write_text(text)
        print({stdout!r})
        """)
    with pytest.raises(ParseError, match=message) as err:
        CommandGenerator(cmd, timeout=30).generate(_request())
    assert err.value.provenance["generator"] == "command"


def test_empty_command_is_refused():
    with pytest.raises(GenerationError, match="needs a command"):
        CommandGenerator("  ")
