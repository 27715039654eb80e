"""regen: GPU kernels as intent specs + oracles; implementations are regenerated, verified and cached."""

__version__ = "0.1.0"
# 2: generate keys cover the target family's generation view; cache/ stores bytes once by digest
SCHEMA_VERSION = 2
