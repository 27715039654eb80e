"""What crosses between the parent and the child: the job file, the child process itself, and the
sealed result. The child's result is authenticated with a one-time key sent over its stdin (never
on disk), so a result written or altered by anything else fails `result-integrity`."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import procs
from .trace import enabled as trace_enabled

REGEN_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent.parent)
CHILD_MODULE = "regen.judge.child"


def seal(body: str, key: bytes) -> str:
    """The result as written: its body and an HMAC over it with the parent's one-time key."""
    return json.dumps({"body": body, "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()})


def unseal(path: Path, key: bytes) -> dict:
    """The child's result, only if it carries a valid MAC under this run's key."""
    forged = {"kind": "result-integrity"}
    try:
        sealed = json.loads(path.read_text())
        body, mac = sealed["body"], sealed["mac"]
        want = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not (isinstance(mac, str) and hmac.compare_digest(mac, want)):
            return {**forged, "error": "the result file does not carry this run's key: it was "
                                       "written or altered by something other than the verifier"}
        data = json.loads(body)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return {**forged, "error": f"the result file is not the verifier's ({type(exc).__name__}): "
                                   "it was written or altered by something other than the verifier"}
    if "error" in data:
        data["kind"] = "crash"
    return data


def run_child(job: dict, timeout_s: float) -> dict:
    """Run one job in a child process; never raises for anything the kernel does. A failure comes
    back as {"error": ..., "kind": GUARD} (timeout, crash or result-integrity)."""
    key = os.urandom(32)
    with tempfile.TemporaryDirectory(prefix="regen-verify-") as tmp:
        result = Path(tmp) / "result.json"
        traced = trace_enabled()  # the child's progress lines go straight to our stderr
        # the flag travels in the job (unlinked before the artifact loads), not the environment
        job = {**job, "result": str(result), "trace": traced}
        job_path = Path(tmp) / "job.json"
        job_path.write_text(json.dumps(job))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (REGEN_PACKAGE_PARENT, env.get("PYTHONPATH")) if p)
        env.pop("ANTHROPIC_API_KEY", None)  # untrusted code never sees credentials
        env.pop("REGEN_SECRET_SEED", None)
        env.pop("REGEN_TRACE", None)
        env["REGEN_JUDGE_PARENT"] = str(os.getpid())   # the child dies with this process
        # A session of its own: the artifact's process joins the child's group, and the timeout
        # or a signal to regen (procs.stop_on_signals) kills the whole group.
        proc = procs.start([sys.executable, "-m", CHILD_MODULE, str(job_path)], cwd=tmp,
                           env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=None if traced else subprocess.PIPE)
        try:
            out, err = proc.communicate(input=key.hex().encode() + b"\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            procs.check()
            return {"error": f"timed out after {timeout_s:.0f} s (a hang, or far too slow)",
                    "kind": "timeout"}
        except procs.Stopped:  # the group is killed already: reap the leader, then unwind
            proc.kill()
            proc.wait()
            raise
        finally:
            procs.finished(proc)
        procs.check()  # killed by a signal to regen, not by what the artifact did
        if result.exists() or result.is_symlink():
            return unseal(result, key)
        tail = "(its stderr is above: REGEN_TRACE)" if err is None else \
            err.decode(errors="replace")[-1500:]
        if proc.returncode < 0:
            name = signal.Signals(-proc.returncode).name
            return {"error": f"the child process died with {name}: {tail.strip()[-400:]}",
                    "kind": "crash"}
        return {"error": f"the child process exited {proc.returncode} without a result: "
                         f"{tail.strip()[-600:]}", "kind": "crash"}
