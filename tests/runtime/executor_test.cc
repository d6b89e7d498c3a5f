// The executor's call log on each rank equals its program (DESIGN.md §1.3: the executor runs the
// schedule, it does not re-derive it), for every kind and a range of shapes.
#include "weft/runtime/executor.h"

#include <gtest/gtest.h>

#include "weft/schedule/schedule.h"

namespace weft::runtime {
namespace {

using schedule::Instr;
using schedule::Op;

// A stage that does nothing but write down what it was asked to do.
class RecordingStage : public StageRunner {
 public:
  schedule::Program log;
  void forward(int s, int m) override { log.push_back({Op::Forward, s, m, -1}); }
  void backward(int s, int m) override { log.push_back({Op::Backward, s, m, -1}); }
  void backward_input(int s, int m) override { log.push_back({Op::BackwardInput, s, m, -1}); }
  void backward_weight(int s, int m) override { log.push_back({Op::BackwardWeight, s, m, -1}); }
  void send_activation(int s, int m, int p) override { log.push_back({Op::SendAct, s, m, p}); }
  void recv_activation(int s, int m, int p) override { log.push_back({Op::RecvAct, s, m, p}); }
  void send_grad(int s, int m, int p) override { log.push_back({Op::SendGrad, s, m, p}); }
  void recv_grad(int s, int m, int p) override { log.push_back({Op::RecvGrad, s, m, p}); }
  void reduce_grads(int s) override { log.push_back({Op::ReduceGrads, s, -1, -1}); }
  void optimizer_step() override { log.push_back({Op::OptimizerStep, -1, -1, -1}); }
};

TEST(Executor, CallsTheStageExactlyAsTheProgramSays) {
  int checked = 0;
  for (schedule::Kind kind : schedule::all_kinds()) {
    for (int pp : {1, 2, 4}) {
      for (int vp : {1, 2}) {
        for (int m : {4, 8}) {
          auto made = schedule::make_schedule(kind, {.pp = pp, .vp = vp, .microbatches = m});
          if (!made.ok()) continue;
          const schedule::Schedule s =
              schedule::add_optimizer_step(schedule::add_communication(std::move(made).value()));
          for (int r = 0; r < pp; ++r) {
            RecordingStage stage;
            execute(s.programs[r], stage);
            EXPECT_EQ(stage.log, s.programs[r]) << schedule::kind_name(kind) << " pp=" << pp
                                                << " vp=" << vp << " m=" << m << " rank " << r;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 30);
}

}  // namespace
}  // namespace weft::runtime
