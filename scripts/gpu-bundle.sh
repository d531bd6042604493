#!/usr/bin/env bash
# Builds here (a machine with nvcc and the project's Debian packages, no GPU
# needed) everything scripts/gpu-check.sh runs on a GPU machine, into
# build/gpu-bundle: the binaries (static CUDA runtime, static gtest) and the
# shared libraries they need that a bare CUDA image lacks (pcre2, libedit,
# cpp-httplib and theirs); the model explain reads (models/dsv4-tiny) is in
# the working tree the device tool copies. glibc,
# libstdc++ and libgcc stay the target's own (build here on the older
# distribution), and the driver's libcuda is never carried.
#
#   scripts/gpu-bundle.sh            # all archs (sm_80 ... sm_120a)
#   NIBBLE_CUDA_ARCHS=90a scripts/gpu-bundle.sh   # one arch, faster
# Then, with the device tool: run `scripts/gpu-check.sh build/gpu-bundle`
# with carry ["build/gpu-bundle"].
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build/gpu}
ARCHS=${NIBBLE_CUDA_ARCHS:-80;86;89;90a;100a;120a}
JOBS=${JOBS:-2}
nice -n 19 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA=ON \
  -DNIBBLE_CUDA_ARCHS="$ARCHS" >/dev/null
nice -n 19 cmake --build "$BUILD" -j "$JOBS" --target nibble test_cuda
out=build/gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in "$BUILD/nibble" "$BUILD/tests/test_cuda"; do
  strip -o "$out/bin/$(basename "$b")" "$b"
done
# Shared libraries, except the C/C++ runtime and the driver.
ldd "$out"/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
echo "gpu-bundle: $(du -sh "$out" | cut -f1) in $out (carry limit 64 MiB):"
ls -l "$out/bin" "$out/lib" | awk 'NF > 5 {print "  " $5 "  " $9}'
