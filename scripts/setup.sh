#!/usr/bin/env bash
# Install regen and everything its tests need on a fresh Debian 12 machine (CPU only is fine):
#   1. Debian packages (as root, with apt-get): python3 and python3-venv, g++ (the cpu column),
#      git (regen diff), clang-22, lld-22, llvm-22 and libamdhip64-dev (the HIP column).
#   2. A virtual environment, .venv/ (REGEN_VENV to move it): Debian 12 refuses `pip install` into
#      the system Python. It sees the system's site-packages, so a torch already installed for
#      python3 (the CPU build on the development machines, a CUDA build on a GPU machine) is kept.
#   3. torch 2.13.0 into the venv when it has none (see install_torch for where from and how big).
#   4. regen itself, editable, with its CUDA (pip-only NVRTC), HIP, LLM, fleet and test extras.
# Every download is announced, with its size, before it starts. Run it again at any time: what is
# there is kept. Afterwards: .venv/bin/regen ...  and  .venv/bin/python -m pytest -q
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${REGEN_VENV:-.venv}
TORCH_VERSION=2.13.0
TORCH_CPU_INDEX=${REGEN_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
DEBIAN_PACKAGES=(python3 python3-venv g++ git ca-certificates clang-22 lld-22 llvm-22 libamdhip64-dev)

say() { echo "setup: $*"; }
die() { echo "setup: error: $*" >&2; exit 1; }

# -- 1. Debian packages -------------------------------------------------------------------------
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for p in "${DEBIAN_PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" = "install ok installed" ] || missing+=("$p")
  done
else
  for c in python3 g++ git clang-22 ld.lld-22; do command -v "$c" >/dev/null 2>&1 || missing+=("$c"); done
fi
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    say "installing Debian packages: ${missing[*]} (apt-get, from this machine's Debian mirrors)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    policy=$(apt-cache policy clang-22)  # (not piped into grep -q: pipefail and SIGPIPE)
    if ! grep -q "Candidate: [0-9]" <<<"$policy"; then
      die "apt has no clang-22: it comes from bookworm-security; add
  deb http://deb.debian.org/debian-security bookworm-security main
to /etc/apt/sources.list (a Debian 12 installation has it), then run this again"
    fi
    log=$(mktemp)
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
      cat "$log" >&2; die "apt-get install failed (above)"
    fi
    grep -E "^(Need to get|After this operation)" "$log" | sed 's/^/setup:   apt: /' || true
    rm -f "$log"
  else
    say "missing: ${missing[*]}; as root on Debian this script installs them (apt-get)"
    command -v python3 >/dev/null 2>&1 || die "python3 is needed: apt-get install python3 python3-venv"
    command -v g++ >/dev/null 2>&1 || say "warning: without g++ the cpu column cannot compile"
    command -v clang-22 >/dev/null 2>&1 || say "warning: without clang-22 the HIP column says what it misses"
  fi
fi

# -- 2. the virtual environment -----------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  say "creating the virtual environment $VENV (python3 -m venv --system-site-packages)"
  python3 -m venv --system-site-packages "$VENV" \
    || die "python3 -m venv failed: on Debian, apt-get install python3-venv"
fi
PY="$VENV/bin/python"
"$PY" -m pip --version >/dev/null 2>&1 || die "$VENV has no pip: remove it and run this again"
pip_install() { "$PY" -m pip install -q --progress-bar off "$@"; }

# -- 3. torch -----------------------------------------------------------------------------------
# The oracle side needs torch; the CPU build is enough. In order of preference:
#   a torch the venv already sees (the system's or an earlier run's): kept, nothing downloaded;
#   a torch ${TORCH_VERSION} wheel on this machine's disk that pip knows of (its find-links):
#     installed from there, nothing downloaded but torch's small pure-Python dependencies;
#   PyTorch's CPU index (REGEN_TORCH_INDEX): the CPU build, about 190 MB;
#   PyPI, when that index cannot be reached: PyPI's Linux torch is the CUDA build, which needs
#     NVIDIA's CUDA libraries: about 3.5 GB to download and 7 GB on disk (it runs on the CPU too).
install_torch() {
  if "$PY" -c "import torch" >/dev/null 2>&1; then
    say "torch $("$PY" -c 'import torch; print(torch.__version__)') is already installed: kept"
    return
  fi
  local here
  here=$(mktemp -d)
  if "$PY" -m pip download -q --no-index --no-deps "torch==${TORCH_VERSION}" -d "$here" >/dev/null 2>&1; then
    local wheel
    wheel=$(ls "$here"/torch-*.whl)
    say "installing torch from a wheel on this machine's disk: $(basename "$wheel") (no download)"
    pip_install "$wheel"
  elif "$PY" - "$TORCH_CPU_INDEX" <<'EOF' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=15)
EOF
  then
    say "downloading torch ${TORCH_VERSION}, the CPU build (about 190 MB), from ${TORCH_CPU_INDEX}"
    pip_install "torch==${TORCH_VERSION}" --index-url "$TORCH_CPU_INDEX"
  else
    say "PyTorch's CPU index (${TORCH_CPU_INDEX}) cannot be reached from here, so torch comes from PyPI,"
    say "  whose torch ${TORCH_VERSION} for Linux is the CUDA build: torch (527 MB) and NVIDIA's CUDA"
    say "  libraries, about 3.5 GB to download and 7 GB in $VENV; it runs on the CPU as well."
    say "  (REGEN_TORCH_INDEX=URL names another index with the CPU build.)"
    pip_install "torch==${TORCH_VERSION}" -e ".[cuda,hip,llm,fleet,test]"  # one resolution: the CUDA pins agree
  fi
  rm -rf "$here"
}
install_torch

# -- 4. regen -----------------------------------------------------------------------------------
say "installing regen (editable) with its extras from PyPI, what the venv lacks of: pydantic, pyyaml,"
say "  networkx, diskcache, numpy, cuda-bindings, NVRTC 13.0 with the CUDA runtime headers, cuobjdump"
say "  and nvdisasm (about 150 MB), hip-python, anthropic, pytest; the fleet's fsspec, s3fs, ray"
say "  (about 70 MB), cryptography, moto's S3 server for its tests and matplotlib (regen profile's chart)"
pip_install -e ".[cuda,hip,llm,fleet,test]"

"$VENV/bin/regen" --help >/dev/null
"$PY" -c "import regen, os, sys; sys.exit(os.path.dirname(regen.__file__) != os.path.abspath('regen'))" \
  || die "$VENV imports regen from $("$PY" -c 'import regen; print(regen.__file__)'), not from here"
say "ok: $VENV/bin/regen ...   $VENV/bin/python -m pytest -q"
