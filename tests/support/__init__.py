"""Helpers the tests share (not tests themselves): the committed kernel library read from cache/,
comparison against oracles, the CUDA-on-CPU emulation and the host runtime runner."""
