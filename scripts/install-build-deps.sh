#!/usr/bin/env bash
# Installs the Debian packages leantune's build needs (run as root; uses sudo otherwise).
set -euo pipefail
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS=(build-essential cmake ninja-build pkg-config libdnnl-dev nlohmann-json3-dev libpcre2-dev libicu-dev
      libfmt-dev libyaml-cpp-dev libcli11-dev libcpp-httplib-dev libgtest-dev libgmock-dev libbenchmark-dev libomp-dev
      python3 python3-venv libopenmpi-dev openmpi-bin
      ccache  # scripts/test.sh: build/ and the Python package's build-python/ share their objects
      clang libclang-rt-dev)  # clang + libFuzzer: scripts/fuzz.sh
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
