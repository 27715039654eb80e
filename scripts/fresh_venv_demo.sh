#!/usr/bin/env bash
# regen as a user gets it, in a fresh virtual environment (the transcript: docs/fresh-venv.md):
#   1. a wheel of regen (`pip wheel . --no-deps`) and `regen export -t cpu` of this checkout's
#      verified host columns, built as a wheel too;
#   2. a new venv with both installed by pip from the configured package index (torch comes from
#      there as well: a few hundred MB, which is why this is a script and not a CI test);
#   3. examples/train_step.py run from a folder outside the checkout with the exported package
#      only (--ops regen_kernels) while regen, yaml and pydantic cannot be imported at all;
#   4. the exported package refusing to import once one of its binaries is altered.
# Usage: scripts/fresh_venv_demo.sh [WORKDIR]   (PYTHON=... picks the interpreter for the venv;
#        TORCH=... what pip installs for torch, e.g. TORCH='torch==2.13.0+cpu' for the CPU build
#        rather than the CUDA one with its several GB of nvidia-* wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
WORK=${1:-$(mktemp -d /tmp/regen-fresh-venv.XXXXXX)}
PY=${PYTHON:-python3}
TORCH=${TORCH:-torch}
HOST_PY=${REGEN_PYTHON:-$REPO/.venv/bin/python}  # a python that runs this checkout's regen
mkdir -p "$WORK"
run() { echo "\$ $*"; "$@"; }

echo "== 1. build: regen's wheel, and the exported package of the verified host columns"
run "$HOST_PY" -m pip wheel . --no-deps -q -w "$WORK/dist"
run env PYTHONPATH="$REPO" "$HOST_PY" -m regen.cli export -t cpu -o "$WORK/pkg"
run "$HOST_PY" -m pip wheel "$WORK/pkg" --no-deps -q -w "$WORK/dist"
ls -l "$WORK/dist"

echo "== 2. a fresh venv, both wheels installed from the package index"
run "$PY" -m venv "$WORK/venv"
V="$WORK/venv/bin"
# (pip's notes about index folders without a given package are left out of the transcript)
run "$V/pip" install -q "$TORCH" "$WORK"/dist/regen_kernels-*.whl "$WORK"/dist/regen-*.whl \
  2> "$WORK/pip-install.err" || { cat "$WORK/pip-install.err"; exit 1; }
grep -v "^WARNING: Location .* is ignored" "$WORK/pip-install.err" || true
run "$V/pip" list --format=freeze 2>/dev/null | grep -Ei '^(regen|torch|pydantic|pyyaml)'

echo "== 3. the training example with the exported package only (regen, yaml, pydantic blocked)"
mkdir -p "$WORK/app" "$WORK/blocker"
cp examples/llama.py examples/train_step.py "$WORK/app/"
for m in regen yaml pydantic; do
  mkdir -p "$WORK/blocker/$m"
  echo "raise ImportError('$m is not importable here')" > "$WORK/blocker/$m/__init__.py"
done
cd "$WORK/app"
run env PYTHONPATH="$WORK/blocker" "$V/python" -c \
  "import regen_kernels as rk; print('ops:', ', '.join(rk.kernels())); print('differentiable:', ', '.join(rk.differentiable()))
try:
    import regen
except ImportError as e:
    print('import regen:', e)"
run env PYTHONPATH="$WORK/blocker" "$V/python" train_step.py --ops regen_kernels --steps 3

echo "== 4. an altered binary: the package refuses to import"
SITE=$("$V/python" -c "import regen_kernels, os; print(os.path.dirname(regen_kernels.__file__))")
BIN=$(ls "$SITE"/binaries/* | head -1)
printf '\x00' >> "$BIN"
set +e
env PYTHONPATH="$WORK/blocker" "$V/python" -c "import regen_kernels" 2>&1 | tail -1
set -e
echo "== done ($WORK)"
