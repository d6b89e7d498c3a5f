#!/usr/bin/env bash
# `weft ckpt export-hf` read by a GPT-2 of its own (hf_standalone_gpt2.py): for a model trained with
# a BPE vocabulary from `weft tokenizer train`, and one with GPT-2's, the export's tokenizer files
# give weft's ids and its weights weft's loss. The run directory is moved and the tokenizer it was
# trained with deleted first: the checkpoint's own copy of the tokenizer must carry the export and
# `weft generate`.
# Usage: hf_export_standalone.sh WEFT PYTHON SOURCE_DIR SCRATCH_DIR
set -euo pipefail
weft=$1 python=$2 src=$3 dir=$4
rm -rf "$dir" && mkdir -p "$dir"
# Plain English with digits, punctuation, contractions and runs of spaces: every branch of GPT-2's
# pre-tokenization pattern.
head -c 60000 /usr/share/common-licenses/GPL-3 > "$dir/corpus.txt"
printf "It's 2026: the model's loss -- we'll see  if   it's 3.5 or 42!\n%s" \
  "$(sed -n '30,34p' /usr/share/common-licenses/GPL-3)" > "$dir/text.txt"

check() {  # NAME TOKENIZER VOCAB
  local name=$1 tok=$2 vocab=$3 run="$dir/$1"
  "$weft" preprocess --input "$dir/corpus.txt" --tokenizer "$tok" --output "$dir/$name-data" >/dev/null
  cat > "$dir/$name.toml" <<TOML
[model]
name = "standalone-$name"
n_layer = 2
n_embd = 32
n_head = 4
vocab_size = $vocab
max_seq_len = 64
[data]
train = "$dir/$name-data"
tokenizer = "$tok"
val_fraction = 0.1
[train]
seq_len = 64
micro_batch = 2
global_batch = 2
steps = 3
lr = 1e-2
eval_every = 0
save_every = 3
[run]
out_dir = "$run-original"
TOML
  "$weft" train "$dir/$name.toml" >/dev/null 2>"$dir/$name-train.log" || { cat "$dir/$name-train.log"; exit 1; }
  mv "$run-original" "$run"  # the run moves; a trained tokenizer directory is gone
  [ "$tok" = gpt2 ] || rm -rf "$tok"
  "$weft" ckpt export-hf "$run/checkpoints" "$dir/$name-hf"
  local ids loss
  ids=$("$weft" tokenizer encode --tokenizer "$run/checkpoints/tokenizer" --input "$dir/text.txt")
  loss=$("$weft" generate --checkpoint "$run/checkpoints" --prompt "$(cat "$dir/text.txt")" --score \
         | sed -n 's/.*mean loss \([0-9.e+-]*\) nats.*/\1/p')
  echo "$name: weft's loss on the text: $loss"
  "$python" "$src/tests/checkpoint/hf_standalone_gpt2.py" "$dir/$name-hf" "$dir/text.txt" "$ids" "$loss"
}

"$weft" tokenizer train --input "$dir/corpus.txt" --vocab 400 --output "$dir/bpe400" >/dev/null
check trained "$dir/bpe400" 400
check gpt2 gpt2 50257
echo "hf_export_standalone: both exports read back as weft's model"
