"""What hardware this machine has, per target column, probed without importing torch.

The fingerprint names the device a verification ran on; records are matched by it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from functools import lru_cache
from importlib import metadata


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=1)
def host() -> dict:
    model = platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"vendor": "host", "device": model, "arch": platform.machine(), "cores": os.cpu_count()}


@lru_cache(maxsize=1)
def nvidia_gpus() -> tuple[dict, ...]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return ()
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    gpus = []
    for line in out.stdout.strip().splitlines():
        name, _, driver = line.partition(",")
        if name.strip():
            gpus.append({"vendor": "nvidia", "device": name.strip(), "driver": driver.strip()})
    return tuple(gpus)


@lru_cache(maxsize=1)
def amd_gpus() -> tuple[dict, ...]:
    tool = shutil.which("rocminfo")
    if tool is None:
        return ()
    try:
        out = subprocess.run([tool], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ()
    gpus, name = [], None
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Marketing Name:"):
            name = line.split(":", 1)[1].strip()
        if line.startswith("Name:") and "gfx" in line and name:
            gpus.append({"vendor": "amd", "device": name, "arch": line.split(":", 1)[1].strip()})
            name = None
    return tuple(gpus)


def identity(fingerprint: dict) -> dict:
    """The fields that name a piece of hardware (records are matched on these)."""
    keys = ("vendor", "device", "arch", "cores") if fingerprint.get("vendor") == "host" else \
        ("vendor", "device", "driver", "arch")
    return {k: fingerprint[k] for k in keys if k in fingerprint}


def local(target) -> dict | None:
    """This machine's fingerprint for a target column, or None if the hardware is not here."""
    if target.vendor == "host":
        fp = host()
        return fp if not target.hardware.match or any(m in fp["arch"] for m in target.hardware.match) else None
    gpus = nvidia_gpus() if target.vendor == "nvidia" else amd_gpus()
    for gpu in gpus:
        if any(m.lower() in (gpu["device"] + " " + gpu.get("arch", "")).lower()
               for m in target.hardware.match):
            return gpu
    return None


def runtime_versions(target) -> dict:
    out = {"torch": _version("torch")}
    if target.vendor == "nvidia":
        out["cuda-bindings"] = _version("cuda-bindings")
    elif target.vendor == "amd":
        out["hip-python"] = _version("hip-python")
    return out


def visible_gpu() -> dict | None:
    """The GPU this process is pinned to (CUDA_VISIBLE_DEVICES, as Ray sets it for a task that
    asks for one GPU, or `regen worker --gpus`): its index on the host and its UUID."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not visible:
        return None
    out = {"cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"]}
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return out
    try:
        res = subprocess.run([smi, "--query-gpu=index,uuid,name", "--format=csv,noheader",
                              "-i", visible], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return out
    parts = [p.strip() for p in res.stdout.strip().split(",")]
    if res.returncode == 0 and len(parts) >= 3:
        out.update({"index": int(parts[0]) if parts[0].isdigit() else parts[0],
                    "uuid": parts[1], "name": parts[2]})
    return out
