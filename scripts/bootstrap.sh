#!/usr/bin/env bash
# Installs what weft needs on Debian 12, from Debian's packages only, skipping what is present.
# Called by `make test` and `make run`; safe to run again.
set -euo pipefail

packages=(
  cmake ninja-build g++ pkg-config clang-format
  libdnnl-dev            # GEMM backend (docs/gemm-backend.md)
  libfmt-dev libtomlplusplus-dev nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy   # independent oracle for the model test and the baseline benchmark
  python3-regex          # the standalone GPT-2 reader of the HF export test (GPT-2's \p{L} regex)
  libxxhash-dev          # checkpoint shard checksums (XXH3)
  openmpi-bin libopenmpi-dev   # the MPI backend (weft_comm_mpi) and the mpi tests (mpirun)
  libpcre2-dev bible-kjv   # GPT-2's pre-tokenization regex; the tokenizer test corpus (KJV)
  clang libclang-rt-14-dev   # the fuzz tests (tests/fuzz): clang's libFuzzer, ASan and UBSan
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# GPT-2's tokenizer files (installs node/npm itself if needed); before the early exit below.
bash "$(dirname "$0")/fetch_assets.sh"
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "bootstrap: installing ${missing[*]}"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "bootstrap: done"
