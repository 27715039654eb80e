"""Who pushed a remote object, and whether to believe it: ed25519 signatures (the `cryptography`
package) over the digest of what is pushed.

Key files are text, one key a line:
    public  (the trust file, and KEY.pub):  ed25519 <64 hex: raw public key> <name>
    private (REGEN_SIGNING_KEY, mode 600):  ed25519-private <64 hex: raw seed> <name>
A key is named by its id: the first 16 hex digits of the sha256 of its raw public key."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError


def key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _crypto():
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise InputError("signing and --trust need the `cryptography` package: "
                         "pip install 'regen[fleet]'") from None
    return ed25519


@dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes

    @property
    def public(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        pk = _crypto().Ed25519PrivateKey.from_private_bytes(self.seed).public_key()
        return pk.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def id(self) -> str:
        return key_id(self.public)

    def sign(self, message: bytes) -> str:
        return _crypto().Ed25519PrivateKey.from_private_bytes(self.seed).sign(message).hex()


def _parse_line(path: Path, lineno: int, line: str, kind: str) -> tuple[bytes, str]:
    parts = line.split(None, 2)
    if len(parts) < 2 or parts[0] != kind:
        raise InputError(f"expected `{kind} <64 hex digits> [name]`", file=str(path), line=lineno)
    try:
        raw = bytes.fromhex(parts[1])
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise InputError(f"expected 64 hex digits (a raw ed25519 key), got {parts[1][:20]!r}",
                         file=str(path), line=lineno)
    return raw, (parts[2].strip() if len(parts) > 2 else "")


def load_signer(path: str) -> Signer:
    p = Path(path)
    try:
        lines = [(i, ln.strip()) for i, ln in enumerate(p.read_text().splitlines(), 1)
                 if ln.strip() and not ln.lstrip().startswith("#")]
    except FileNotFoundError:
        raise InputError("signing key file not found (`regen remote keygen FILE` writes one)",
                         file=path, field="REGEN_SIGNING_KEY") from None
    if len(lines) != 1:
        raise InputError("expected one `ed25519-private HEX NAME` line", file=path)
    seed, name = _parse_line(p, lines[0][0], lines[0][1], "ed25519-private")
    return Signer(name or p.stem, seed)


def keygen(path: Path, name: str) -> Signer:
    """Write a new private key to `path` (mode 600) and its public line to `path`.pub."""
    if path.exists():
        raise InputError("exists already: not overwritten", file=str(path))
    seed = os.urandom(32)
    signer = Signer(name, seed)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"ed25519-private {seed.hex()} {name}\n")
    Path(f"{path}.pub").write_text(f"ed25519 {signer.public.hex()} {name}\n")
    return signer


class Trust:
    """`any`: every digest-valid object is believed (who pushed it is still recorded).
    A key file: only objects signed by one of its keys."""

    def __init__(self, policy: str = "any"):
        self.policy = policy
        self.keys: dict[str, tuple[bytes, str]] = {}
        if policy != "any":
            p = Path(policy)
            for i, line in enumerate(p.read_text().splitlines(), 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    raw, name = _parse_line(p, i, line.strip(), "ed25519")
                    self.keys[key_id(raw)] = (raw, name or key_id(raw))

    def check(self, message: bytes, public_hex: str | None, signature: str | None) -> str | None:
        """Why an object is not believed (None: believed). A signature is always checked against
        the key it names; the trust file decides whether that key counts."""
        if not public_hex or not signature:
            return None if self.policy == "any" else "unsigned"
        ed25519 = _crypto()
        from cryptography.exceptions import InvalidSignature

        try:
            raw = bytes.fromhex(public_hex)
            ed25519.Ed25519PublicKey.from_public_bytes(raw).verify(bytes.fromhex(signature), message)
        except (InvalidSignature, ValueError):
            return f"bad signature (key {public_hex[:16]}…)"
        if self.policy != "any" and key_id(raw) not in self.keys:
            return f"signed by key {key_id(raw)}, which the trust file does not list"
        return None

    def name_of(self, public_hex: str) -> str | None:
        """The trust file's name for a key (None where the file does not list it)."""
        try:
            return self.keys.get(key_id(bytes.fromhex(public_hex)), (b"", None))[1]
        except ValueError:
            return None
