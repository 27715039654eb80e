"""The remote cache: what one machine built or verified, shared with the others through object
storage (any fsspec URL: s3://, gs://, file://, memory://).

    config.py   where the remote is (REGEN_REMOTE, [tool.regen] in pyproject.toml or regen.toml)
                and which pushers are believed (--trust, REGEN_TRUST, [tool.regen] trust)
    objects.py  the bucket as a content-addressed store: create-only writes, digest-checked reads
    trust.py    ed25519 keys: pushes are signed, a trust policy says whose records count
    sync.py     pull before planning (entries, compiled binaries, records), push after a node

It sits behind the local store (regen/store.py): the planner and the builder only ever read
cache/; pulling copies into cache/ what the remote holds and this project lacks, pushing copies
out what a node produced. fsspec (and s3fs for s3://) is the optional extra `regen[fleet]`.
"""

from .config import RemoteConfig, remote_config  # noqa: F401
