// Lowering: compute-only programs -> programs with matched point-to-point messages, and the
// end-of-step instructions. The communication model is in docs/schedules.md: sends are eager
// (the executor posts them non-blocking and waits for them before reusing the buffer or at the
// end of the step), receives block until the message is there. Under that model a receive
// right before its consumer and a send right after its producer add no wait the compute-only
// order did not already have, so lowering cannot introduce a deadlock.

#include <set>

#include "weft/schedule/schedule.h"

namespace weft::schedule {

Schedule add_communication(Schedule schedule) {
  const Shape& shape = schedule.shape;
  const int last = shape.num_stages() - 1;
  for (int rank = 0; rank < static_cast<int>(schedule.programs.size()); ++rank) {
    const Program& in = schedule.programs[rank];
    Program out;
    out.reserve(in.size() * 2);
    for (const Instr& instr : in) {
      WEFT_CHECK(!is_p2p(instr.op) && instr.op != Op::ReduceGrads && instr.op != Op::OptimizerStep,
                 "add_communication expects a compute-only schedule, found ", op_name(instr.op));
      const int s = instr.stage, mb = instr.microbatch;
      // A forward receives its input and sends its output; a B or I receives the gradient of its
      // output and sends that of its input; a W neither. Neighbouring stages share a rank only
      // when pp == 1; then no message is needed.
      const bool forward = instr.op == Op::Forward;
      const bool input_grad = instr.op == Op::Backward || instr.op == Op::BackwardInput;
      auto remote = [&](int other) { return shape.rank_of(other) != rank; };
      if (forward && s > 0 && remote(s - 1))
        out.push_back({Op::RecvAct, s, mb, shape.rank_of(s - 1)});
      if (input_grad && s < last && remote(s + 1)) {
        out.push_back({Op::RecvGrad, s, mb, shape.rank_of(s + 1)});
      }
      out.push_back(instr);
      if (forward && s < last && remote(s + 1)) {
        out.push_back({Op::SendAct, s, mb, shape.rank_of(s + 1)});
      }
      if (input_grad && s > 0 && remote(s - 1)) {
        out.push_back({Op::SendGrad, s, mb, shape.rank_of(s - 1)});
      }
    }
    schedule.programs[rank] = std::move(out);
  }
  return schedule;
}

Schedule add_optimizer_step(Schedule schedule) {
  for (Program& program : schedule.programs) {
    // Each stage's ReduceGrads follows its last instruction on this rank.
    std::vector<bool> last_of_stage(program.size(), false);
    std::set<int> stages;
    for (std::size_t i = program.size(); i-- > 0;) {
      WEFT_CHECK(program[i].op != Op::ReduceGrads && program[i].op != Op::OptimizerStep,
                 "add_optimizer_step: the schedule already ends its step");
      last_of_stage[i] = stages.insert(program[i].stage).second;
    }
    Program out;
    out.reserve(program.size() + stages.size() + 1);
    for (std::size_t i = 0; i < program.size(); ++i) {
      out.push_back(program[i]);
      if (last_of_stage[i]) out.push_back({Op::ReduceGrads, program[i].stage, -1, -1});
    }
    out.push_back({Op::OptimizerStep, -1, -1, -1});
    program = std::move(out);
  }
  return schedule;
}

}  // namespace weft::schedule
