#!/usr/bin/env bash
# Configures and builds leantune into build/ (build/bin/leantune), installing Debian build deps first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-build-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
ninja -C build -j"$(nproc)"
