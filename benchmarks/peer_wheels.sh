#!/usr/bin/env bash
# Wheels of the QuACK peer (quack-kernels and the CUTLASS DSL it runs on) for a GPU machine that has
# no registry, laid out so that two consecutive device calls can carry them: one call carries at
# most 64 MiB, and the DSL's CUDA 13 library wheel alone is ~92 MB (a stripped 193 MB shared
# library; xz gets it only to 63 MB). So that wheel is cut in two, about 58 MB a call:
#   .peers/1/  its first 55 MiB                          call 1: carry [".peers/1"], command
#                                                        `mkdir -p /tmp/peers && cp .peers/1/* /tmp/peers/`
#   .peers/2/  the rest, the other wheels, SHA256SUMS    call 2: carry [".whl", ".peers/2"], command
#                                                        `bash benchmarks/h200_run.sh peers small ...`
# Call 2 must follow call 1 while the machine is warm (it keeps /tmp between calls, not after).
#   usage (here, from the project root): bash benchmarks/peer_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.peers/' .git/info/exclude 2>/dev/null || echo '/.peers/' >> .git/info/exclude
rm -rf .peers && mkdir -p .peers/dl .peers/1 .peers/2
plat=""; for n in 17 24 27 28 31 34 35; do plat="$plat --platform manylinux_2_${n}_x86_64"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $plat --platform manylinux2014_x86_64 --platform any -d .peers/dl \
  quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 nvidia-cutlass-dsl-libs-base==4.8.1 \
  nvidia-cutlass-dsl-libs-core==4.8.1 nvidia-cutlass-dsl-libs-cu13==4.8.1 apache-tvm-ffi \
  torch-c-dlpack-ext einops
(cd .peers/dl && sha256sum *.whl > ../2/SHA256SUMS)
big=$(ls .peers/dl/nvidia_cutlass_dsl_libs_cu13-*.whl)
split -b 55m "$big" ".peers/1/$(basename "$big").part-"
mv .peers/1/"$(basename "$big")".part-a[b-z] .peers/2/
rm "$big" && mv .peers/dl/*.whl .peers/2/ && rmdir .peers/dl
du -sh .peers/1 .peers/2 .whl 2>/dev/null
