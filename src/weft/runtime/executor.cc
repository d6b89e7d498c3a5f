#include "weft/runtime/executor.h"

namespace weft::runtime {

void execute(const schedule::Program& program, StageRunner& runner) {
  using schedule::Op;
  for (const schedule::Instr& i : program) {
    switch (i.op) {
      case Op::Forward:
        runner.forward(i.stage, i.microbatch);
        break;
      case Op::Backward:
        runner.backward(i.stage, i.microbatch);
        break;
      case Op::BackwardInput:
        runner.backward_input(i.stage, i.microbatch);
        break;
      case Op::BackwardWeight:
        runner.backward_weight(i.stage, i.microbatch);
        break;
      case Op::SendAct:
        runner.send_activation(i.stage, i.microbatch, i.peer);
        break;
      case Op::RecvAct:
        runner.recv_activation(i.stage, i.microbatch, i.peer);
        break;
      case Op::SendGrad:
        runner.send_grad(i.stage, i.microbatch, i.peer);
        break;
      case Op::RecvGrad:
        runner.recv_grad(i.stage, i.microbatch, i.peer);
        break;
      case Op::ReduceGrads:
        runner.reduce_grads(i.stage);
        break;
      case Op::OptimizerStep:
        runner.optimizer_step();
        break;
    }
  }
}

}  // namespace weft::runtime
