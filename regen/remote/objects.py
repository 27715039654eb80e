"""The remote bucket as a content-addressed store, on fsspec.

    objects/<2>/<62>                                bytes by sha256 (as in cache/objects/)
    entries/<kernel>/<entry-id>.json                an entry's manifest (its id is its digest)
    generations/<kernel>/<generate-key>/<E>.json    envelope: this generation's entry id
    records/<kernel>/<target>/<entry-id>/<E>.json   envelope: a verification record
    compiled/<compile-key>/<E>.json                 envelope: a compile result (binary by digest)

An envelope holds a body, who pushed it and (optionally) an ed25519 signature over the body's
digest; it is named `<body digest, 32 hex>-<pusher>.json`, where the pusher is the signing key's
id or, unsigned, a digest of who pushed it. So every name has exactly one right content.

Writes never replace a different object: a create-only put where the backend has one (S3's
If-None-Match, a hard link on a local file system), a check-then-write elsewhere, and always a
read-back that compares the bytes. The one exception is an object whose bytes do not match its
own name (a truncated or corrupted upload): that is replaced by the right content. Reads check
the digest; a mismatch is refetched once and otherwise refused.
"""

from __future__ import annotations

import json
import os
import uuid

from ..errors import InputError, RegenError
from ..keys import digest


class RemoteError(RegenError):
    """The remote cannot be reached or refused a write."""


class RemoteConflict(RemoteError):
    """A different object already holds this name: nothing is overwritten."""


class RemoteCorrupt(RemoteError):
    """A remote object does not match its digest (truncated or changed): refused."""


def _json(value) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True) + "\n").encode()


def envelope_name(body_digest: str, envelope: dict) -> str:
    signer = envelope.get("signer")
    who = f"k{signer['id']}" if signer else f"u{digest(envelope.get('pushed_by', '').encode())[:12]}"
    return f"{body_digest[:32]}-{who}.json"


class RemoteStore:
    def __init__(self, url: str):
        try:
            import fsspec
        except ImportError:
            raise InputError("a remote cache needs fsspec (and s3fs for s3://): "
                             "pip install 'regen[fleet]'", field="remote") from None
        self.url = url.rstrip("/")
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url)
        except (ImportError, ValueError) as exc:
            raise InputError(f"cannot open {url}: {exc} (s3:// needs s3fs, gs:// needs gcsfs: "
                             "pip install 'regen[fleet]')", field="remote") from None
        self.root = root.rstrip("/")
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple)
                                else (self.fs.protocol,))
        self.stats = {"written": 0, "present": 0, "repaired": 0, "read": 0, "refetched": 0}

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

    # -- writing ---------------------------------------------------------------------------
    def _create(self, rel: str, data: bytes) -> bool:
        """Write `data` only if nothing is at `rel`; False if something is."""
        path = self.path(rel)
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{os.path.dirname(path)}/.tmp-{uuid.uuid4().hex}"
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)       # atomic, and fails if the name exists
                return True
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
        try:
            self.fs.pipe_file(path, data, mode="create")
            return True
        except FileExistsError:
            return False
        except Exception as exc:  # noqa: BLE001 - backends spell "precondition failed" differently
            text = f"{type(exc).__name__}: {exc}"
            if "PreconditionFailed" in text or "412" in text or "exists" in text.lower():
                return False
            raise RemoteError(f"{self.url}: cannot write {rel}: {text}") from None

    def _read(self, rel: str) -> bytes | None:
        try:
            data = self.fs.cat_file(self.path(rel))
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - network and permission errors of any backend
            raise RemoteError(f"{self.url}: cannot read {rel}: {type(exc).__name__}: {exc}") from None
        self.stats["read"] += 1
        return bytes(data)

    def put(self, rel: str, data: bytes, valid) -> str:
        """Create-only put, then read back: "written", "present" (same bytes were there) or
        "repaired" (the bytes there failed `valid`, i.e. did not match their own name)."""
        created = self._create(rel, data)
        got = self._read(rel)
        if got == data:
            self.stats["written" if created else "present"] += 1
            return "written" if created else "present"
        if got is not None and valid(got):
            raise RemoteConflict(f"{self.url}/{rel} holds different content under this name; "
                                 "not overwritten")
        self.fs.pipe_file(self.path(rel), data)     # corrupt (or vanished): put the right bytes
        if self._read(rel) != data:
            raise RemoteError(f"{self.url}/{rel}: the write did not read back as written")
        self.stats["repaired"] += 1
        return "repaired"

    # -- objects ---------------------------------------------------------------------------
    @staticmethod
    def object_rel(d: str) -> str:
        return f"objects/{d[:2]}/{d[2:]}"

    def put_object(self, data: bytes) -> str:
        d = digest(data)
        self.put(self.object_rel(d), data, lambda b: digest(b) == d)
        return d

    def get_object(self, d: str) -> bytes | None:
        """The bytes of digest `d`, None if absent; RemoteCorrupt if they do not match twice."""
        for attempt in range(2):
            data = self._read(self.object_rel(d))
            if data is None or digest(data) == d:
                return data
            self.stats["refetched"] += attempt == 0
        raise RemoteCorrupt(f"{self.url}/{self.object_rel(d)} does not match its digest "
                            f"(truncated or changed): refused")

    # -- manifests -------------------------------------------------------------------------
    def put_manifest(self, kernel: str, entry_id: str, manifest: dict) -> None:
        from ..store import _entry_id

        self.put(f"entries/{kernel}/{entry_id}.json", _json(manifest),
                 lambda b: _valid_manifest(b, entry_id, _entry_id))

    def get_manifest(self, kernel: str, entry_id: str) -> dict | None:
        from ..store import _entry_id

        for _ in range(2):
            data = self._read(f"entries/{kernel}/{entry_id}.json")
            if data is None:
                return None
            if _valid_manifest(data, entry_id, _entry_id):
                return json.loads(data)
        raise RemoteCorrupt(f"{self.url}/entries/{kernel}/{entry_id}.json does not match its "
                            "entry id: refused")

    # -- envelopes -------------------------------------------------------------------------
    def put_envelope(self, folder: str, body: dict, pushed_by: str, signer=None) -> str:
        d = digest(body)
        env = {"body": body, "pushed_by": pushed_by, "signer": None, "signature": None}
        if signer is not None:
            env["signer"] = {"id": signer.id, "key": signer.public.hex(), "name": signer.name}
            env["signature"] = signer.sign(d.encode())
        rel = f"{folder}/{envelope_name(d, env)}"
        self.put(rel, _json(env), lambda b: _valid_envelope(b, rel))
        return rel

    def list(self, prefix: str) -> list[str]:
        """Every object under `prefix` (relative names), listed afresh."""
        self.fs.invalidate_cache()
        try:
            found = self.fs.find(self.path(prefix))
        except FileNotFoundError:
            return []
        except Exception as exc:  # noqa: BLE001
            raise RemoteError(f"{self.url}: cannot list {prefix}: {type(exc).__name__}: {exc}") \
                from None
        cut = len(self.root) + 1
        return sorted(p[cut:] if p.startswith(self.root + "/") else p for p in found
                      if not os.path.basename(p).startswith(".tmp-"))

    def get_envelope(self, rel: str) -> dict | None:
        for _ in range(2):
            data = self._read(rel)
            if data is None:
                return None
            if _valid_envelope(data, rel):
                return json.loads(data)
        raise RemoteCorrupt(f"{self.url}/{rel} does not match its name (truncated or changed): "
                            "refused")


def _valid_manifest(data: bytes, entry_id: str, entry_id_of) -> bool:
    try:
        return entry_id_of(json.loads(data)) == entry_id
    except (ValueError, TypeError, AttributeError):
        return False


def _valid_envelope(data: bytes, rel: str) -> bool:
    try:
        env = json.loads(data)
        return isinstance(env, dict) and isinstance(env.get("body"), dict) and \
            envelope_name(digest(env["body"]), env) == os.path.basename(rel)
    except (ValueError, TypeError, KeyError):
        return False
