#!/usr/bin/env bash
# The README's run command (`make run`): fetch Jane Austen's novels from Debian, train a 4096-token
# BPE vocabulary on them, preprocess into a Megatron .bin/.idx dataset, train a 6-layer GPT for a
# few minutes with a live progress line, print its validation loss next to the corpus's unigram
# entropy, and sample a paragraph. Metrics, loss.svg and checkpoints land in runs/austen-demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
weft=${WEFT:-build/release/bin/weft}
# DEMO=austen-llama-demo: the same demo with every modern choice on (rotary positions, RMSNorm,
# SwiGLU, grouped-query attention, an untied head, no biases).
demo=${DEMO:-austen-demo}
run=configs/runs/$demo.toml
out=runs/$demo
[ -f "$run" ] || { echo "demo: no run config $run (DEMO=austen-demo or austen-llama-demo)" >&2; exit 1; }

bash scripts/fetch_corpus.sh
if [ ! -s data/austen-bpe/encoder.json ]; then
  "$weft" tokenizer train --input data/corpus/austen.txt --vocab 4096 --output data/austen-bpe
fi
if [ ! -s data/austen.idx ]; then
  # each paragraph is a document, so the model learns where paragraphs end
  "$weft" preprocess --input data/corpus/austen.txt --tokenizer data/austen-bpe \
    --output data/austen --split-blank-lines
fi
if [ -d "$out" ]; then
  echo "demo: starting afresh (previous run moved to $out.prev)"
  rm -rf "$out.prev" && mv "$out" "$out.prev"
fi
"$weft" train "$run" "$@"
echo
echo "demo: a paragraph from the trained model, continuing its prompt:"
prompt="It is a truth universally acknowledged"
"$weft" generate --checkpoint "$out/checkpoints" --prompt "$prompt" --tokens 160 \
  --temperature 0.8 --top-k 40 --seed 1
echo
echo "demo: metrics $out/metrics.jsonl, loss plot $out/loss.svg"
