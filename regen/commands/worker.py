"""Join a Ray cluster as a verification worker for one column: `ray start` with the column's
resource (`regen/<target>`), pinned to the GPUs given, so the Ray executor routes that column's
verifications here (`regen build --executor ray`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from . import _common

HELP = "serve a column's verifications to a Ray cluster (regen build --executor ray)"


def add_arguments(parser) -> None:
    parser.add_argument("--column", "-c", required=True, metavar="T",
                        help="the target column whose hardware is on this machine (a name in targets/)")
    parser.add_argument("--address", metavar="ADDR",
                        help="the cluster's head (host:port; default: $RAY_ADDRESS)")
    parser.add_argument("--gpus", metavar="IDS",
                        help="GPU indices to serve, e.g. 0,1,2,3 (default: every GPU nvidia-smi "
                             "lists, for a GPU column). Ray pins each verification to one of them "
                             "(CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--slots", type=int, metavar="N",
                        help="verifications at once (default: one per GPU; 1 for the host column, "
                             "so timings do not share the cores)")
    parser.add_argument("--timing-lock", choices=("auto", "on", "off"), default="auto",
                        help="take turns at timing across this host's GPUs (default: auto, on "
                             "with more than one slot)")
    parser.add_argument("--name", help="the worker's name in records (default: host name)")
    parser.add_argument("--dry-run", action="store_true", help="print the ray start command")


def run(args) -> int:
    from .. import hardware
    from ..errors import InputError

    project = _common.project(args)
    target = project.target(args.column)
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise InputError("which cluster? pass --address HOST:PORT (what `ray start --head` printed) "
                         "or set RAY_ADDRESS", field="--address")
    env = dict(os.environ)
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--address", address, "--block"]
    gpus: list[str] = []
    if target.vendor != "host":
        gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else \
            [str(i) for i in range(len(hardware.nvidia_gpus() or hardware.amd_gpus()))]
        if not gpus and not args.dry_run:
            raise InputError(f"no GPU here for column {target.name}: pass --gpus IDS",
                             field="--gpus")
        env["CUDA_VISIBLE_DEVICES" if target.vendor == "nvidia" else "HIP_VISIBLE_DEVICES"] = \
            ",".join(gpus)
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"   # CUDA's indices are nvidia-smi's (records name them)
        cmd += ["--num-gpus", str(len(gpus))]
    slots = args.slots or max(1, len(gpus))
    cmd += ["--resources", json.dumps({f"regen/{target.name}": slots})]
    if args.timing_lock == "on" or (args.timing_lock == "auto" and slots > 1):
        env["REGEN_TIMING_LOCK"] = os.path.join(
            os.environ.get("TMPDIR", "/tmp"), f"regen-timing-{os.getuid()}.lock")
    env["REGEN_WORKER_NAME"] = args.name or os.uname().nodename
    shown = " ".join(f"{k}={env[k]}" for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                                "REGEN_TIMING_LOCK", "REGEN_WORKER_NAME")
                     if k in env and env.get(k) != os.environ.get(k))
    print(f"regen worker: {shown} {' '.join(cmd)}", file=sys.stderr)
    if args.dry_run:
        return 0
    try:
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
