#pragma once
// The layouts' figures of an earlier `weft tune` (its tune.json), for `weft tune --refit-from`.

#include <string>
#include <vector>

#include "weft/planner/config.h"
#include "weft/planner/tune.h"

namespace weft::cli {

// The layouts' figures of an earlier `weft tune` of the same job (its tune.json), which join this
// tune's in the refit: the machine's speed moves from one minute to the next (this machine: the
// same 16 layouts 7% apart between two tables, and the tensor-parallel collectives' cost fitted
// at 81 and 155 us), so a preset refitted from several tables holds for more minutes than one
// fitted from one.
struct TuneFigures {
  std::vector<planner::TrialMeasurement> layouts;  // each measured layout's figure
  double gemm_speed = 0;  // the fastest GEMM speed that tune probed (0: none recorded)
};

// Throws weft::Error, saying what to change, on a file that is not a tune.json of this weft, of
// another job (model, processes, threads, global batch, sequence length), or with no figure.
TuneFigures read_tune_figures(const std::string& path, const planner::Job& job, int threads);

}  // namespace weft::cli
