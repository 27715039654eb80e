#!/usr/bin/env bash
# Prove scripts/setup.sh on a stock Debian 12: debootstrap a clean bookworm root (with the apt
# sources a Debian 12 installation writes), copy this working tree into it, and inside a chroot,
# with an empty environment (no pip configuration, no preinstalled Python packages), run setup and
# then the README's commands on a few test files. Needs root and Debian's mirrors.
#   bash scripts/clean_root_setup.sh [ROOT_DIR] [PYTEST_ARGS...]
# ROOT_DIR defaults to /tmp/regen-clean-root. debootstrap runs once into ROOT_DIR.base (kept for the
# next run; delete it to fetch anew); each run starts from a fresh copy of it. KEEP_ROOT=0 deletes
# both at the end. The transcript is printed; `time` lines time each step.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${1:-/tmp/regen-clean-root}
shift || true
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(tests/test_cli.py tests/test_runtime_cpu.py tests/test_hip.py)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "clean-root: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
fi

if [ ! -x "$ROOT.base/usr/bin/apt-get" ]; then
  echo "clean-root: debootstrap bookworm $ROOT.base ($MIRROR)"
  rm -rf "$ROOT.base"
  time debootstrap bookworm "$ROOT.base" "$MIRROR" > "$ROOT.debootstrap.log" 2>&1 \
    || { tail -20 "$ROOT.debootstrap.log"; exit 1; }
fi
rm -rf "$ROOT" && cp -a "$ROOT.base" "$ROOT"
# What a Debian 12 installation writes: main, updates and security.
cat > "$ROOT/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
# Where this machine's network inspects TLS through a proxy with a CA of its own, the host's CA
# bundle is all that is carried in besides the source (HOST_CA=0 on a network that needs none).
carry_env=()
if [ "${HOST_CA:-1}" = 1 ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$ROOT/etc/ssl" && cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/host-network-ca.crt"
  carry_env=(SSL_CERT_FILE=/etc/ssl/host-network-ca.crt PIP_CERT=/etc/ssl/host-network-ca.crt)
fi

# The working tree as git sees it (tracked and untracked, not ignored), nothing built.
rm -rf "$ROOT/src" && mkdir -p "$ROOT/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} sh -c '[ -e "{}" ] && echo "{}"' \
  | tar -c -T - | tar -x -C "$ROOT/src"

mounted=()
cleanup() {
  for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
  if [ "${KEEP_ROOT:-1}" = 0 ]; then rm -rf "$ROOT" "$ROOT.base" "$ROOT.debootstrap.log"; fi
}
trap cleanup EXIT
mount -t proc proc "$ROOT/proc" && mounted+=("$ROOT/proc")
mount --bind /dev "$ROOT/dev" && mounted+=("$ROOT/dev")
mount --bind /dev/pts "$ROOT/dev/pts" && mounted+=("$ROOT/dev/pts")
mount -t tmpfs tmpfs "$ROOT/tmp" && mounted+=("$ROOT/tmp")

echo "clean-root: carried in: the source tree; ${carry_env[*]:-no CA bundle}"
echo "clean-root: inside: $(chroot "$ROOT" cat /etc/debian_version), python3: $(chroot "$ROOT" sh -c 'command -v python3 || echo none'), g++: $(chroot "$ROOT" sh -c 'command -v g++ || echo none'), git: $(chroot "$ROOT" sh -c 'command -v git || echo none')"
inside() {
  chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 "${carry_env[@]}" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "cd /src && $1"
}
echo "clean-root: \$ bash scripts/setup.sh"
time inside "bash scripts/setup.sh"
echo "clean-root: \$ du -sh .venv; .venv/bin/regen --version"
inside "du -sh .venv && .venv/bin/regen --version"
echo "clean-root: \$ REGEN_LOCAL_CACHE=\$(mktemp -d) .venv/bin/python -m pytest -q ${TESTS[*]}"
time inside "REGEN_LOCAL_CACHE=\$(mktemp -d) .venv/bin/python -m pytest -q -p no:cacheprovider ${TESTS[*]}"
echo "clean-root: ok"
