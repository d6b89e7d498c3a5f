// weft tokenizer: train a byte-level BPE vocabulary (GPT-2's file format), and encode or decode
// with GPT-2's tokenizer or a trained one.
//   weft tokenizer train --input FILE [--input FILE2 ...] --vocab N --output DIR
//   weft tokenizer encode --tokenizer gpt2|DIR (--text STR | --input FILE) [--output IDS.bin]
//   weft tokenizer decode --tokenizer gpt2|DIR (--ids "15496 995" | --input IDS.bin)
// IDS.bin files hold little-endian int32 ids.

#include <fmt/core.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "weft/cli/commands.h"
#include "weft/core/check.h"
#include "weft/core/clock.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/data/bpe_trainer.h"

namespace weft::cli {
namespace {

std::string read_all(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read the {} '{}'", what, path));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

data::BpeTokenizer load_tokenizer(const std::string& name) {
  const std::string dir = data::resolve_tokenizer_dir(name);
  std::string heading = fmt::format("cannot load the tokenizer '{}'", name);
  if (name == "gpt2") heading += " (run scripts/fetch_assets.sh, or set WEFT_ASSETS)";
  return data::BpeTokenizer::load(dir).value_or_throw(heading);
}

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;
  int vocab = 0;
  std::string output;
};

void run_train(const TokenizerTrainOptions& o) {
  data::BpeTrainOptions options;
  options.vocab_size = o.vocab;
  options.progress = [](const std::string& line) {
    fmt::print(stderr, "tokenizer train: {}\n", line);
  };
  data::check_bpe_train_options(options).throw_if_error("cannot train the tokenizer");
  const auto t0 = SteadyClock::now();
  data::BpeWordCounts words;
  for (const std::string& path : o.inputs) {
    fmt::print(stderr, "tokenizer train: reading {}\n", path);
    words.add_file(path).throw_if_error("cannot read the training corpus");
  }
  fmt::print(stderr, "tokenizer train: {:.1f} MB, {} pieces, {} distinct ({:.1f} s)\n",
             words.bytes() / 1e6, words.pieces(), words.counts().size(), seconds_since(t0));
  const data::BpeVocab vocab =
      data::train_bpe(words, options).value_or_throw("cannot train the tokenizer");
  data::write_bpe_files(vocab, o.output).throw_if_error("cannot write the tokenizer");
  // Load what was written: the files must be usable as they are.
  const data::BpeTokenizer tok = data::BpeTokenizer::load(o.output).value_or_throw(
      "the trained tokenizer does not load (a bug)");
  fmt::print("trained {} tokens ({} merges) from {:.1f} MB in {:.2f} s: {} ({})\n",
             tok.vocab_size(), vocab.merges.size(), words.bytes() / 1e6, seconds_since(t0),
             o.output, tok.identity());
}

struct EncodeOptions {
  std::string tokenizer, text, input, output;
};

void run_encode(const EncodeOptions& o) {
  if (o.text.empty() == o.input.empty()) throw Error("give exactly one of --text or --input");
  const data::BpeTokenizer tok = load_tokenizer(o.tokenizer);
  const std::string text = o.input.empty() ? o.text : read_all(o.input, "input");
  const auto t0 = SteadyClock::now();
  const std::vector<int32_t> ids = tok.encode(text);
  const double s = seconds_since(t0);
  if (o.output.empty()) {
    fmt::print("{}\n", fmt::join(ids, " "));
  } else {
    std::ofstream out(o.output, std::ios::binary);
    out.write(reinterpret_cast<const char*>(ids.data()),
              static_cast<std::streamsize>(ids.size() * sizeof(int32_t)));
    out.close();
    if (!out) throw Error(fmt::format("cannot write the ids to '{}'", o.output));
  }
  fmt::print(stderr, "encoded {} bytes into {} tokens in {:.3f} s ({:.2f} MB/s, 1 thread, {})\n",
             text.size(), ids.size(), s, s > 0 ? text.size() / s / 1e6 : 0.0, tok.identity());
}

struct DecodeOptions {
  std::string tokenizer, ids, input;
};

void run_decode(const DecodeOptions& o) {
  if (o.ids.empty() == o.input.empty()) throw Error("give exactly one of --ids or --input");
  const data::BpeTokenizer tok = load_tokenizer(o.tokenizer);
  std::vector<int32_t> ids;
  if (!o.input.empty()) {
    const std::string bytes = read_all(o.input, "ids file");
    if (bytes.size() % sizeof(int32_t) != 0) {
      throw Error(fmt::format("'{}' is not a file of int32 ids: {} bytes is not a multiple of 4",
                              o.input, bytes.size()));
    }
    ids.resize(bytes.size() / sizeof(int32_t));
    std::memcpy(ids.data(), bytes.data(), bytes.size());
  } else {
    std::string list = o.ids;
    std::replace(list.begin(), list.end(), ',', ' ');
    std::istringstream words(list);
    for (std::string w; words >> w;) {
      int32_t id = 0;
      const auto [end, error] = std::from_chars(w.data(), w.data() + w.size(), id);
      if (error != std::errc() || end != w.data() + w.size()) {
        throw Error(fmt::format("--ids: '{}' is not a token id", w));
      }
      ids.push_back(id);
    }
  }
  const std::string text = tok.decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("tokenizer", "train, encode with or decode with a BPE tokenizer");
  cmd->require_subcommand(1);

  auto train_o = std::make_shared<TokenizerTrainOptions>();
  CLI::App* train = cmd->add_subcommand(
      "train", "learn a byte-level BPE vocabulary; writes DIR/encoder.json and DIR/vocab.bpe");
  train->add_option("--input", train_o->inputs, "training text (repeat for more files)")
      ->required();
  train
      ->add_option("--vocab", train_o->vocab,
                   "vocabulary size, 256 bytes and <|endoftext|> included")
      ->required();
  train->add_option("--output", train_o->output, "folder for encoder.json and vocab.bpe")
      ->required();
  train->callback([train_o] { run_train(*train_o); });

  auto enc_o = std::make_shared<EncodeOptions>();
  CLI::App* encode = cmd->add_subcommand("encode", "print the token ids of a text");
  const std::string tokenizer_help = "gpt2, or a folder with encoder.json and vocab.bpe";
  encode->add_option("--tokenizer", enc_o->tokenizer, tokenizer_help)->required();
  encode->add_option("--text", enc_o->text, "the text");
  encode->add_option("--input", enc_o->input, "a file holding the text");
  encode->add_option("--output", enc_o->output, "write int32 ids here instead of printing them");
  encode->callback([enc_o] { run_encode(*enc_o); });

  auto dec_o = std::make_shared<DecodeOptions>();
  CLI::App* decode = cmd->add_subcommand("decode", "print the text of token ids");
  decode->add_option("--tokenizer", dec_o->tokenizer, tokenizer_help)->required();
  decode->add_option("--ids", dec_o->ids, "ids separated by spaces or commas");
  decode->add_option("--input", dec_o->input, "a file of int32 ids");
  decode->callback([dec_o] { run_decode(*dec_o); });
}

}  // namespace weft::cli
