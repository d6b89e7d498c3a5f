// weft generate --checkpoint DIR --prompt "..." [--tokens N --temperature T --top-k K --seed S]:
// text from a trained model. The model config and the tokenizer come from the checkpoint; the
// context is the last max_seq_len tokens (a sliding window); sampling draws from the
// counter-based RNG, so a seed reproduces a sample.

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "weft/checkpoint/checkpoint.h"
#include "weft/cli/checkpoint_tokenizer.h"
#include "weft/cli/commands.h"
#include "weft/cli/validators.h"
#include "weft/core/rng.h"
#include "weft/data/bpe_tokenizer.h"
#include "weft/kernels/kernels.h"
#include "weft/model/gpt.h"
#include "weft/runtime/sampling.h"

namespace weft::cli {
namespace {

struct GenerateOptions {
  std::string checkpoint, prompt, tokenizer;
  bool score = false;
  int tokens = 64, top_k = 0, threads = 0;
  double temperature = 1.0;
  uint64_t seed = 0;
  bool stop_at_eot = true;
};

// Without a tokenizer ("none": the model was trained on ids), the prompt is ids and so is the
// output.
std::vector<int32_t> parse_ids(const std::string& text, int vocab) {
  std::vector<int32_t> ids;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    const long v = std::strtol(word.c_str(), &end, 10);
    if (*end != '\0' || v < 0 || v >= vocab) {
      throw Error(fmt::format(
          "--prompt: the checkpoint has no tokenizer, so the prompt is token ids in [0, {}); "
          "'{}' is not one",
          vocab, word));
    }
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

void run_generate(const GenerateOptions& o) {
  const std::string dir = checkpoint::resolve(o.checkpoint).value_or_throw("cannot generate");
  const auto md = checkpoint::read_metadata(dir).value_or_throw("cannot generate");
  const model::GptConfig& cfg = md.model;
  kernels::set_num_threads(o.threads > 0 ? o.threads
                                         : static_cast<int>(std::thread::hardware_concurrency()));

  CheckpointTokenizer loaded = load_checkpoint_tokenizer(dir, md, o.tokenizer);
  std::optional<data::BpeTokenizer>& tok = loaded.tokenizer;
  const std::string& spec = loaded.dir;
  if (tok && tok->vocab_size() > cfg.vocab_size) {
    throw Error(fmt::format(
        "vocabulary mismatch: tokenizer {} has {} tokens, more than the model's vocab_size={} "
        "({})",
        spec, tok->vocab_size(), cfg.vocab_size, dir));
  }
  std::vector<int32_t> ids = tok ? tok->encode(o.prompt) : parse_ids(o.prompt, cfg.vocab_size);
  if (ids.empty()) {
    if (!tok) throw Error("--prompt: give at least one token id (the checkpoint has no tokenizer)");
    ids.push_back(tok->eot_id());  // an empty prompt starts a new document
  }

  model::Gpt gpt(cfg, 1, cfg.max_seq_len);
  checkpoint::load(dir, cfg, gpt.params(), nullptr, nullptr).throw_if_error("cannot generate");

  if (o.score) {
    // The mean next-token loss of the prompt: token i + 1 predicted from tokens 0..i, over at most
    // max_seq_len + 1 tokens (one window). What an independent reader of an export reproduces.
    if (ids.size() < 2) throw Error("--score: the prompt must have at least 2 tokens");
    const int T = std::min<int>(static_cast<int>(ids.size()) - 1, cfg.max_seq_len);
    const float loss = gpt.forward(ids.data(), ids.data() + 1, 1, T);
    fmt::print("{} tokens, mean loss {:.9g} nats/token\n", T + 1, loss);
    return;
  }

  std::fputs(o.prompt.c_str(), stdout);
  if (!tok && !o.prompt.empty()) std::fputs(" |", stdout);
  std::fflush(stdout);
  const uint64_t key = stream_key(o.seed, "generate");
  const int Vp = cfg.padded_vocab();
  for (int n = 0; n < o.tokens; ++n) {
    const int T = std::min<int>(static_cast<int>(ids.size()), cfg.max_seq_len);
    const int32_t* ctx = ids.data() + ids.size() - T;
    gpt.forward(ctx, nullptr, 1, T);
    const float* logits = gpt.logits() + static_cast<int64_t>(T - 1) * Vp;
    const int32_t next = runtime::sample_token(logits, cfg.vocab_size, o.temperature, o.top_k,
                                               uniform_at(key, static_cast<uint64_t>(n)));
    if (tok && o.stop_at_eot && next == tok->eot_id()) break;
    ids.push_back(next);
    if (tok) {
      const std::string& bytes = tok->decode(next);
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
    } else {
      fmt::print(" {}", next);
    }
    std::fflush(stdout);
  }
  std::fputs("\n", stdout);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text from a checkpoint");
  auto o = std::make_shared<GenerateOptions>();
  cmd->add_option("--checkpoint", o->checkpoint,
                  "a checkpoint directory, or a directory holding `latest` (a run's checkpoints/)")
      ->required();
  cmd->add_option("--prompt", o->prompt,
                  "text to continue (token ids when trained without a "
                  "tokenizer); empty: start a new document");
  cmd->add_option("--tokens", o->tokens, "tokens to generate")->check(kNonNegative);
  cmd->add_option("--temperature", o->temperature, "softmax temperature; 0: greedy")
      ->check(kNonNegative);
  cmd->add_option("--top-k", o->top_k, "sample among the k most likely tokens; 0: all")
      ->check(kNonNegative);
  cmd->add_option("--seed", o->seed, "seed of the sampling");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "override the checkpoint's tokenizer (gpt2 or a dir)");
  cmd->add_option("--threads", o->threads, "kernel threads (default: all cores)");
  cmd->add_flag("!--no-stop", o->stop_at_eot, "keep going past <|endoftext|>");
  cmd->add_flag("--score", o->score,
                "print the model's mean next-token loss on the prompt (one window) instead of "
                "generating");
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace weft::cli
