#!/usr/bin/env bash
# Regenerate the PTX fixtures of tests/ptx from kernels.cu with nvcc (CUDA 13: sm_75 and newer).
# The generated .ptx files are committed, so the tests run where nvcc is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$here/../fixtures"
mkdir -p "$out"
NVCC="${NVCC:-nvcc}"
for arch in sm_75 sm_80 sm_86 sm_90; do
  "$NVCC" -ptx -arch="$arch" -O3 "$here/kernels.cu" -o "$out/kernels_${arch}_O3.ptx"
done
# unoptimised device code (NVVM -O0) and debug PTX (-G: .loc/.file/debug sections)
"$NVCC" -ptx -arch=sm_80 -Xcicc -O0 "$here/kernels.cu" -o "$out/kernels_sm_80_O0.ptx"
"$NVCC" -ptx -arch=sm_86 -G "$here/kernels.cu" -o "$out/kernels_sm_86_G.ptx"
"$NVCC" -ptx -arch=sm_90 -O1 "$here/kernels.cu" -o "$out/kernels_sm_90_O1.ptx"
echo "wrote $(ls "$out"/*.ptx | wc -l) PTX files to $out"
