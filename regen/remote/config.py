"""Where the remote cache is and whom to believe, from the environment or the project's settings.

Precedence: the command line (--remote, --trust), then REGEN_REMOTE / REGEN_TRUST /
REGEN_SIGNING_KEY, then `[tool.regen]` in regen.toml, then in pyproject.toml. A relative key
file path is relative to the project root."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


@dataclass(frozen=True)
class RemoteConfig:
    url: str | None            # an fsspec URL, None: no remote
    trust: str = "any"         # "any", or the path of a file of trusted ed25519 public keys
    signing_key: str | None = None   # the private key this machine signs its pushes with
    pushed_by: str = ""        # who pushes: REGEN_PUSHER, else user@host


def _settings(root: Path) -> tuple[dict, str]:
    import tomllib

    for name in ("regen.toml", "pyproject.toml"):
        path = root / name
        if not path.exists():
            continue
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"invalid TOML: {exc}", file=str(path)) from None
        section = data.get("tool", {}).get("regen") if name == "pyproject.toml" else \
            data.get("tool", {}).get("regen", data)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise InputError("expected a table", file=str(path), field="tool.regen")
        for k in ("remote", "trust", "signing_key"):
            if k in section and not isinstance(section[k], str):
                raise InputError(f"expected a string, got {type(section[k]).__name__}",
                                 file=str(path), field=f"tool.regen.{k}")
        if any(k in section for k in ("remote", "trust", "signing_key")):
            return section, str(path)
    return {}, ""


def _who() -> str:
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no user name in some containers
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def remote_config(root: Path, url: str | None = None, trust: str | None = None,
                  no_remote: bool = False) -> RemoteConfig:
    section, where = _settings(root)
    url = None if no_remote else (url or os.environ.get("REGEN_REMOTE") or section.get("remote"))
    trust = trust or os.environ.get("REGEN_TRUST") or section.get("trust") or "any"
    key = os.environ.get("REGEN_SIGNING_KEY") or section.get("signing_key")
    if trust != "any":
        trust = os.path.expanduser(trust)
        trust = str((root / trust).resolve()) if not Path(trust).is_absolute() else trust
        if not Path(trust).is_file():
            raise InputError("expected `any` or a file of trusted public keys (one `ed25519 HEX "
                             "NAME` per line, as `regen remote keygen` writes)",
                             file=trust, field="--trust")
    if key:
        key = os.path.expanduser(key)
        key = str((root / key).resolve()) if not Path(key).is_absolute() else key
    if url is not None and "://" not in url:
        raise InputError(f"expected an fsspec URL such as s3://bucket/prefix, file:///path or "
                         f"memory://name, got {url!r}", file=where or None, field="remote")
    return RemoteConfig(url, trust, key, os.environ.get("REGEN_PUSHER") or _who())
