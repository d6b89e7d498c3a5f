// weft ckpt inspect DIR | convert IN OUT --to-layout L | export-hf DIR OUT | import-hf IN OUT:
// look into a checkpoint (every file's checksum verified), rewrite it for another parallel layout
// (checkpoint/convert.h), and convert between weft checkpoints and Hugging Face GPT-2 or Llama
// directories (model.safetensors + config.json; checkpoint/hf_gpt2.h and hf_llama.h have the name
// and layout mappings).

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "weft/checkpoint/checkpoint.h"
#include "weft/checkpoint/convert.h"
#include "weft/checkpoint/hf.h"
#include "weft/checkpoint/safetensors.h"
#include "weft/cli/checkpoint_tokenizer.h"
#include "weft/cli/commands.h"
#include "weft/cli/validators.h"
#include "weft/core/clock.h"
#include "weft/layout/layout.h"

namespace weft::cli {
namespace {

std::string model_line(const model::GptConfig& c) {
  std::string line = fmt::format(
      "{}: n_layer={} n_embd={} n_head={} vocab_size={} (padded to {}) max_seq_len={}", c.name,
      c.n_layer, c.n_embd, c.n_head, c.vocab_size, c.padded_vocab(), c.max_seq_len);
  // The variant's choices, where they are not GPT-2's (model/gpt_config.h).
  const model::GptConfig gpt2;
  if (c.n_kv_head > 0 && c.n_kv_head != c.n_head) line += fmt::format(" n_kv_head={}", c.n_kv_head);
  if (c.ffn() != 4 * c.n_embd) line += fmt::format(" ffn_hidden_size={}", c.ffn());
  if (c.rope()) line += fmt::format(" position=rope rope_theta={}", c.rope_theta);
  if (c.rms_norm()) line += " norm=rmsnorm";
  if (c.norm_eps != gpt2.norm_eps) line += fmt::format(" norm_eps={}", c.norm_eps);
  if (c.mlp != gpt2.mlp) line += fmt::format(" mlp={}", model::mlp_name(c.mlp));
  if (!c.tie_embeddings) line += " tie_embeddings=false";
  if (!c.bias) line += " bias=false";
  return line;
}

// Prints everything the metadata says and checks every shard; exit 1 when one does not verify.
void run_inspect(const std::string& path) {
  const std::string dir = checkpoint::resolve(path).value_or_throw("cannot inspect");
  const auto md = checkpoint::read_metadata(dir).value_or_throw("cannot inspect");
  const auto& p = md.parallel;
  const auto& t = md.train;
  fmt::print("checkpoint  {} (weft-checkpoint v{})\n", dir, md.version);
  fmt::print("model       {}\n", model_line(md.model));
  fmt::print("layout      tp={} pp={} dp={} vp={} zero={} (loads under any other)\n", p.tp, p.pp,
             p.dp, p.vp, p.zero);
  fmt::print("step        {}\n", t.step);
  if (md.has_optimizer) {
    fmt::print("optimizer   adamw step {}, beta1={} beta2={} eps={} weight_decay={}\n",
               md.optimizer_step, md.adamw.beta1, md.adamw.beta2, md.adamw.eps,
               md.adamw.weight_decay);
  } else {
    fmt::print("optimizer   none (weights only)\n");
  }
  fmt::print("schedule    {} lr={} min_lr={} warmup_steps={} total_steps={}\n", t.lr_schedule.kind,
             t.lr_schedule.lr, t.lr_schedule.min_lr, t.lr_schedule.warmup_steps,
             t.lr_schedule.total_steps);
  fmt::print("data        seed={} sampler epoch={} position={} data={}\n", t.seed, t.sampler_epoch,
             t.sampler_position, t.data_path.empty() ? "-" : t.data_path);
  fmt::print("tokenizer   {}{}\n", t.tokenizer.empty() ? "-" : t.tokenizer,
             t.tokenizer_identity.empty() ? "" : " (" + t.tokenizer_identity + ")");

  size_t name_w = 4, file_w = 4;
  for (const auto& sh : md.shards) file_w = std::max(file_w, sh.file.size());
  int64_t params = 0;
  for (const auto& ti : md.tensors) {
    name_w = std::max(name_w, ti.name.size());
    file_w = std::max(file_w, ti.file.size());
    if (ti.group == "params") params += ti.count;  // every element is in exactly one piece
  }
  fmt::print("\ntensors     {} pieces ({} parameters)\n", md.tensors.size(), params);
  fmt::print("  {:<6}  {:<{}}  {:<5}  {:<14}  {:<{}}  {:<10}  {}\n", "group", "name", name_w,
             "dtype", "shape", "file", file_w, "offset", "piece");
  for (const auto& ti : md.tensors) {
    // Which part of the tensor: its tensor-parallel shard and, under ZeRO, a range of it.
    std::string piece;
    if (ti.tp > 1) {
      piece = fmt::format("tp shard {}/{} of dim {}{}", ti.tp_rank, ti.tp, ti.split.dim,
                          ti.split.blocks > 1 ? fmt::format(" ({} blocks)", ti.split.blocks) : "");
    }
    if (ti.count != numel(ti.shard_shape())) {
      piece += fmt::format("{}elements [{}, {})", piece.empty() ? "" : ", ", ti.begin,
                           ti.begin + ti.count);
    }
    fmt::print("  {:<6}  {:<{}}  {:<5}  {:<14}  {:<{}}  {:<10}  {}\n", ti.group, ti.name, name_w,
               ti.dtype, shape_str(ti.global_shape), ti.file, file_w, ti.offset,
               piece.empty() ? "whole" : piece);
  }

  int bad = 0;
  fmt::print("\nfiles       {}\n", md.shards.size());
  for (const auto& sh : md.shards) {
    const Status s = checkpoint::verify_shard(dir, sh);
    fmt::print("  {:<{}}  {:>12} bytes  xxh3 {:016x}  {}\n", sh.file, file_w, sh.bytes, sh.xxh3,
               s.ok() ? "ok" : "FAILED");
    if (!s.ok()) {
      ++bad;
      fmt::print("    {}\n", s.message());
    }
  }
  std::fflush(stdout);
  if (bad > 0) {
    throw Error(fmt::format("{} of the {} files of {} do not verify", bad, md.shards.size(), dir));
  }
}

void run_export(const std::string& in, const std::string& out, const std::string& tokenizer) {
  const std::string dir = checkpoint::resolve(in).value_or_throw("cannot export");
  const auto md = checkpoint::read_metadata(dir).value_or_throw("cannot export");
  const CheckpointTokenizer tok = load_checkpoint_tokenizer(dir, md, tokenizer);
  const checkpoint::HfArchitecture arch =
      checkpoint::export_hf(dir, out, tok.dir).value_or_throw("cannot export");
  const std::string weights = out + "/" + checkpoint::kHfWeightsFile;
  const auto st = checkpoint::SafetensorsReader::open(weights).value_or_throw("cannot read back");
  fmt::print("wrote {} ({} tensors, {} bytes of F32) and {}/{} ({}){}\n", weights,
             st.header().tensors.size(), st.header().buffer_bytes, out, checkpoint::kHfConfigFile,
             checkpoint::hf_architecture_name(arch),
             tok.dir.empty() ? " (no tokenizer: the model was trained on token ids)"
                             : fmt::format(", with the tokenizer of {} (vocab.json, merges.txt, "
                                           "tokenizer_config.json)",
                                           tok.dir));
}

void run_convert(const std::string& in, const std::string& out, const std::string& to_layout) {
  const auto to = layout::parse(to_layout).value_or_throw("invalid --to-layout");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = checkpoint::convert(in, out, to).value_or_throw("cannot convert");
  const double s = seconds_since(t0);
  const auto md = checkpoint::read_metadata(dir).value_or_throw("cannot read back");
  int64_t bytes = 0;
  for (const auto& sh : md.shards) bytes += sh.bytes;
  fmt::print("wrote {}: tp={} pp={} dp={} vp={} zero={}, {} files, {} bytes in {:.2f} s\n", dir,
             to.tp, to.pp, to.dp, to.vp, to.zero, md.shards.size(), bytes, s);
}

void run_import(const std::string& in, const std::string& out,
                const checkpoint::HfImportOptions& options, const std::string& tokenizer) {
  const std::string dir =
      checkpoint::import_hf(in, out, options, tokenizer).value_or_throw("cannot import");
  const auto md = checkpoint::read_metadata(dir).value_or_throw("cannot read back");
  fmt::print("wrote {} (weights only, tokenizer {})\n", dir, md.train.tokenizer);
  fmt::print("model       {}\n", model_line(md.model));
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "ckpt", "Inspect checkpoints; convert them to another layout, to and from Hugging Face");
  cmd->require_subcommand(1);

  const std::string checkpoint_help = "a checkpoint directory, or a directory holding `latest`";
  auto* inspect = cmd->add_subcommand(
      "inspect", "Print a checkpoint's config, layout, tensors and files; verify every checksum");
  auto dir = std::make_shared<std::string>();
  inspect->add_option("DIR", *dir, checkpoint_help)->required();
  inspect->callback([dir] { run_inspect(*dir); });

  auto* conv = cmd->add_subcommand(
      "convert", "Rewrite a checkpoint as a job of another parallel layout would write it");
  auto conv_in = std::make_shared<std::string>(), conv_out = std::make_shared<std::string>();
  auto layout = std::make_shared<std::string>();
  conv->add_option("IN", *conv_in, checkpoint_help)->required();
  conv->add_option("OUT", *conv_out, "checkpoint root to write (gets step_<N> and latest)")
      ->required();
  conv->add_option("--to-layout", *layout,
                   "the layout, e.g. tp=2,pp=2,dp=2,vp=1,zero=1 (unnamed: 1, zero 0)")
      ->required();
  conv->callback([conv_in, conv_out, layout] { run_convert(*conv_in, *conv_out, *layout); });

  auto* exp = cmd->add_subcommand(
      "export-hf",
      "Write a checkpoint's weights as a Hugging Face directory: GPT-2 (GPT2LMHeadModel) or, for "
      "rope + rmsnorm + swiglu, Llama (LlamaForCausalLM)");
  auto exp_in = std::make_shared<std::string>(), exp_out = std::make_shared<std::string>();
  exp->add_option("DIR", *exp_in, checkpoint_help)->required();
  exp->add_option("OUT", *exp_out, "output directory: model.safetensors and config.json")
      ->required();
  auto exp_tok = std::make_shared<std::string>();
  exp->add_option("--tokenizer", *exp_tok,
                  "the tokenizer to write beside the weights (gpt2 or a dir; default: the "
                  "checkpoint's)");
  exp->callback([exp_in, exp_out, exp_tok] { run_export(*exp_in, *exp_out, *exp_tok); });

  auto* imp = cmd->add_subcommand(
      "import-hf",
      "Make a weights-only checkpoint of a Hugging Face GPT-2 or Llama directory (config.json's "
      "model_type)");
  auto imp_in = std::make_shared<std::string>(), imp_out = std::make_shared<std::string>();
  auto options = std::make_shared<checkpoint::HfImportOptions>();
  auto tokenizer = std::make_shared<std::string>();
  imp->add_option("IN", *imp_in, "directory with model.safetensors and config.json")->required();
  imp->add_option("OUT", *imp_out, "checkpoint root to create (gets step_00000000 and latest)")
      ->required();
  imp->add_option("--name", options->name, "the model's name (default: from the export, or IN)");
  imp->add_option("--pad-vocab-to", options->pad_vocab_to,
                  "pad the vocabulary to a multiple of this (default: from the export, or 128)")
      ->check(kPositive);
  imp->add_option("--tokenizer", *tokenizer,
                  "tokenizer to record: gpt2, a tokenizer directory or none (default: gpt2 for a "
                  "50257-token vocabulary, else none)");
  imp->callback([imp_in, imp_out, options, tokenizer] {
    run_import(*imp_in, *imp_out, *options, *tokenizer);
  });
}

}  // namespace weft::cli
