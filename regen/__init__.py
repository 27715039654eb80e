"""regen: GPU kernels as intent specs + oracles; implementations are regenerated, verified and cached."""

__version__ = "0.1.0"
# 2: generate keys cover the target family's generation view; cache/ stores bytes once by digest
SCHEMA_VERSION = 2


def patch(model):
    """Swap a PyTorch model's RMSNorm, RoPE, SwiGLU, softmax and cross-entropy modules for
    regen.ops (regen/ops/patch.py). Imports torch and registers the ops on first use."""
    from .ops.patch import patch as _patch

    return _patch(model)
