#!/usr/bin/env bash
# Install everything regen and its tests need on a fresh Debian 12 machine (CPU only is fine).
set -euo pipefail
cd "$(dirname "$0")/.."

# HIP column: clang-22 + lld-22 (bookworm-security) know gfx942/gfx950; Debian's libamdhip64-dev
# provides the HIP headers. Only root on Debian installs them; elsewhere the HIP column reports
# what is missing and how to get it.
if ! command -v clang-22 >/dev/null 2>&1 || ! command -v ld.lld-22 >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-22 lld-22 llvm-22 libamdhip64-dev >/dev/null
  else
    echo "setup: clang-22/lld-22 not installed and cannot apt-get here; the HIP column will say so" >&2
  fi
fi

# torch: keep one that is already there; else the CPU wheel (2.13.0 lies on disk on these machines).
python3 -c "import torch" 2>/dev/null || python3 -m pip install -q "torch==2.13.0"
python3 -m pip install -q -e ".[cuda,hip,llm,test]"
python3 -m regen.cli --help >/dev/null
echo "setup: ok"
