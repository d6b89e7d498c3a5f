#include "weft/runtime/executor.h"

namespace weft::runtime {
namespace {

void run(const schedule::Instr& i, StageRunner& runner) {
  using schedule::Op;
  switch (i.op) {
    case Op::Forward:
      return runner.forward(i.stage, i.microbatch);
    case Op::Backward:
      return runner.backward(i.stage, i.microbatch);
    case Op::BackwardInput:
      return runner.backward_input(i.stage, i.microbatch);
    case Op::BackwardWeight:
      return runner.backward_weight(i.stage, i.microbatch);
    case Op::SendAct:
      return runner.send_activation(i.stage, i.microbatch, i.peer);
    case Op::RecvAct:
      return runner.recv_activation(i.stage, i.microbatch, i.peer);
    case Op::SendGrad:
      return runner.send_grad(i.stage, i.microbatch, i.peer);
    case Op::RecvGrad:
      return runner.recv_grad(i.stage, i.microbatch, i.peer);
    case Op::ReduceGrads:
      return runner.reduce_grads(i.stage);
    case Op::OptimizerStep:
      return runner.optimizer_step();
  }
}

}  // namespace

void execute(const schedule::Program& program, StageRunner& runner) {
  for (const schedule::Instr& i : program) run(i, runner);
}

}  // namespace weft::runtime
