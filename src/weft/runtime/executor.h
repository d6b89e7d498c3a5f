#pragma once
// The pipeline executor (DESIGN.md §1.3, §4): runs one rank's schedule program, instruction by
// instruction, with an exhaustive switch (no default: a new Op cannot go unhandled). What each
// instruction does is a StageRunner's: the real one (pipeline_runner.h) runs the model chunks and
// moves tensors between ranks; a recording one (tests) logs the calls, so a test can check that
// the executor's call log equals the program.

#include "weft/schedule/instr.h"

namespace weft::runtime {

class StageRunner {
 public:
  virtual ~StageRunner() = default;
  virtual void forward(int stage, int microbatch) = 0;
  virtual void backward(int stage, int microbatch) = 0;
  virtual void backward_input(int stage, int microbatch) = 0;
  virtual void backward_weight(int stage, int microbatch) = 0;
  virtual void send_activation(int stage, int microbatch, int peer) = 0;
  virtual void recv_activation(int stage, int microbatch, int peer) = 0;
  virtual void send_grad(int stage, int microbatch, int peer) = 0;
  virtual void recv_grad(int stage, int microbatch, int peer) = 0;
  virtual void reduce_grads(int stage) = 0;
  virtual void optimizer_step() = 0;
};

// Runs `program` (one rank's, lowered) on `runner`, in order.
void execute(const schedule::Program& program, StageRunner& runner);

}  // namespace weft::runtime
