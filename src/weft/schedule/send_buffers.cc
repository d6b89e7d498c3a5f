#include "weft/schedule/send_buffers.h"

#include <algorithm>

#include "weft/core/check.h"
#include "weft/schedule/schedule.h"

namespace weft::schedule {

std::vector<SendBuffers> send_buffers(const Schedule& schedule) {
  const Status structure = check_structure(schedule);
  WEFT_CHECK(structure.ok(), structure.message("send_buffers: malformed schedule"));
  const Shape& shape = schedule.shape;
  bool messages = false;
  for (const Program& p : schedule.programs) {
    for (const Instr& in : p) messages = messages || is_p2p(in.op);
  }
  const Schedule lowered = messages || shape.pp == 1 ? schedule : add_communication(schedule);

  // Which kinds each rank produces: stage outputs (F of a stage but the last), input gradients
  // (B or I of a stage but the first).
  const int last = shape.num_stages() - 1;
  std::vector<SendBuffers> produces(shape.pp);
  int most = 0;  // outputs of one kind on one rank
  for (int r = 0; r < shape.pp; ++r) {
    for (const Instr& in : lowered.programs[r]) {
      if (in.op == Op::Forward && in.stage < last) ++produces[r].activations;
      if ((in.op == Op::Backward || in.op == Op::BackwardInput) && in.stage > 0) {
        ++produces[r].gradients;
      }
    }
    most = std::max({most, produces[r].activations, produces[r].gradients});
  }
  // Two of each kind a rank produces; more, all ranks alike, only where two would deadlock.
  // Whether it does depends only on which instruction waits for which, not on the costs.
  for (int k = kDoubleBuffered;; ++k) {
    std::vector<SendBuffers> buffers(shape.pp);
    for (int r = 0; r < shape.pp; ++r) {
      buffers[r] = {.activations = produces[r].activations > 0 ? k : 0,
                    .gradients = produces[r].gradients > 0 ? k : 0};
    }
    if (k >= most || runs_to_end(lowered, buffers)) return buffers;
  }
}

}  // namespace weft::schedule
