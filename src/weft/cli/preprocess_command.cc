// weft preprocess: tokenize a .txt or .jsonl corpus into a Megatron-LM indexed dataset
// (PREFIX.bin + PREFIX.idx, plus the sidecar PREFIX.json; docs/formats.md).
//   weft preprocess --input FILE --tokenizer gpt2|DIR --output PREFIX [--workers N]
//                   [--json-key text] [--split-blank-lines] [--quiet]

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <memory>

#include "weft/cli/commands.h"
#include "weft/data/preprocess.h"

namespace weft::cli {

void add_preprocess_command(CLI::App& app) {
  auto o = std::make_shared<data::PreprocessOptions>();
  auto quiet = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "preprocess", "Tokenize a .txt or .jsonl corpus into a Megatron indexed dataset (.bin/.idx)");
  cmd->add_option("--input", o->input,
                  "FILE.jsonl (one JSON object per line, text in --json-key) or FILE.txt (one "
                  "document, or paragraphs with --split-blank-lines)")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "gpt2, or a directory with encoder.json and vocab.bpe")
      ->capture_default_str();
  cmd->add_option("--output", o->output, "PREFIX: writes PREFIX.bin, PREFIX.idx and PREFIX.json")
      ->required();
  cmd->add_option("--workers", o->workers, "encoding threads (0: one per hardware thread)")
      ->capture_default_str();
  cmd->add_option("--json-key", o->json_key, "the .jsonl field holding the text")
      ->capture_default_str();
  cmd->add_flag("--split-blank-lines", o->split_blank_lines,
                ".txt: each blank-line-separated paragraph is a document");
  cmd->add_flag("--quiet", *quiet, "no progress line");
  cmd->callback([o, quiet] {
    o->progress = !*quiet;
    const auto s = data::preprocess(*o).value_or_throw();
    const double mb = static_cast<double>(s.input_bytes) / 1e6;
    fmt::print(
        "preprocessed {}: {} documents, {} tokens ({} skipped empty), {:.1f} MB in {:.1f} s "
        "({:.1f} MB/s, {} workers)\n",
        o->input, s.documents, s.tokens, s.empty_documents, mb, s.seconds,
        s.seconds > 0 ? mb / s.seconds : 0.0, s.workers);
    fmt::print("wrote {} ({} tokens), {}, {}\n", s.bin_path, data::token_type_name(s.token_type),
               s.idx_path, s.json_path);
  });
}

}  // namespace weft::cli
