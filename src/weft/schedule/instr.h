#pragma once
// The schedule IR (DESIGN.md §1.3 "Schedules are data", §4): one generator builds every pipeline
// rank's program, a list of instructions; the executor runs it and the planner's simulator prices
// it, so neither re-derives the order.
//
// Stage numbering follows Megatron's interleaving (Narayanan et al., SC'21, §2.2): global stage
// s in 0 .. pp*vp-1 lives on pipeline rank s % pp, so rank r holds model chunks r, r+pp, r+2pp...
// An Instr's `stage` is always the stage it belongs to on *its own* rank (for a receive: the
// consuming stage; for a send: the producing stage); `peer` is the other pipeline rank.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/status.h"

namespace weft::schedule {

// The ops of a microbatch come first, Forward .. RecvGrad: validate.cc indexes arrays by them, and
// svg.cc's colours follow this order.
enum class Op : std::uint8_t {
  Forward,         // F: forward of (stage, microbatch)
  Backward,        // B: full backward (input and weight gradients) of (stage, microbatch)
  BackwardInput,   // I: input-gradient half of a split backward (zero-bubble schedules)
  BackwardWeight,  // W: weight-gradient half of a split backward; needs its I first
  SendAct,         // SA: send stage's output activation to the rank of stage+1
  RecvAct,         // RA: receive stage-1's output activation (the input of `stage`)
  SendGrad,        // SG: send the gradient w.r.t. stage's input to the rank of stage-1
  RecvGrad,        // RG: receive the gradient w.r.t. stage's output from the rank of stage+1
  ReduceGrads,     // R: data-parallel gradient reduction of `stage`'s parameters
  OptimizerStep,   // O: the optimizer step of this rank (no stage, no microbatch)
};

enum class Kind : std::uint8_t { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };

struct Instr {
  Op op = Op::Forward;
  int stage = -1;       // global stage; -1 for OptimizerStep
  int microbatch = -1;  // -1 for ReduceGrads and OptimizerStep
  int peer = -1;        // the other pipeline rank of a send/receive; -1 otherwise
  bool operator==(const Instr&) const = default;
};

using Program = std::vector<Instr>;

struct Shape {
  int pp = 1;            // pipeline ranks
  int vp = 1;            // model chunks (stages) per pipeline rank
  int microbatches = 1;  // m
  int num_stages() const { return pp * vp; }
  // Where each stage lives (Narayanan et al. SC'21: rank r holds stages r, r + pp, ...), the one
  // mapping every engine, checkpoint and planner uses.
  int rank_of(int stage) const { return stage % pp; }
  int chunk_of(int stage) const { return stage / pp; }
  int stage_of(int rank, int chunk) const { return chunk * pp + rank; }
  bool operator==(const Shape&) const = default;
};

struct Schedule {
  Kind kind = Kind::OneFOneB;
  Shape shape;
  std::vector<Program> programs;  // one per pipeline rank
  bool operator==(const Schedule&) const = default;
};

// --- One name table per enum. ---
// Op: a long name ("backward-input") and the code used by the text form and the grid ("I").
std::span<const Op> all_ops();
std::string_view op_name(Op op);
std::string_view op_code(Op op);
Result<Op> parse_op(std::string_view name);  // accepts the long name
// Kind: "gpipe", "1f1b", "interleaved", "zb-h1".
std::span<const Kind> all_kinds();
std::string_view kind_name(Kind kind);
Result<Kind> parse_kind(std::string_view name);

// F, B, I, W: the ops that occupy a rank's compute stream per microbatch.
bool is_compute(Op op);
bool is_send(Op op);
bool is_recv(Op op);
bool is_p2p(Op op);
// Ops that carry a microbatch (everything but ReduceGrads and OptimizerStep).
bool has_microbatch(Op op);

}  // namespace weft::schedule
