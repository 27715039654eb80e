"""regen: GPU kernels as intent specs + oracles; implementations are regenerated, verified and cached."""

__version__ = "0.1.0"
SCHEMA_VERSION = 1
