#!/usr/bin/env bash
# Builds the real llama-server for kvcalc check's tests (tests/helpers/llama_server.py finds it at
# .build/llama-server/bin/llama-server, or wherever $KVCALC_LLAMA_SERVER points): the llama.cpp that
# llama-cpp-python 0.3.36 vendors (commit 0c1e570, build 11312: the same llama.cpp kvcalc's probe
# runs), linked statically, without its web UI or TLS. About 5 min on 2 idle cores, a 15 MB binary;
# nothing is built when the binary is already there. Run from the repository's root.
set -euo pipefail
out=.build/llama-server
if [ -x "$out/bin/llama-server" ]; then
    exit 0
fi
python=${PYTHON:-python3}
rm -rf "$out/src" "$out/cmake"
"$python" -m pip download --quiet --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$out/src"
tar xzf "$out"/src/llama_cpp_python-0.3.36.tar.gz -C "$out/src"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$out/src/llama_cpp_python-0.3.36/vendor/llama.cpp" -B "$out/cmake" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_COMMIT=0c1e570 -DLLAMA_BUILD_NUMBER=11312 \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$out/cmake" --target llama-server -j 2 >/dev/null
mkdir -p "$out/bin"
cp "$out/cmake/bin/llama-server" "$out/bin/"
rm -rf "$out/src" "$out/cmake"
