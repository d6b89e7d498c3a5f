#pragma once
// `weft ckpt convert`: a checkpoint rewritten, offline and in one process, as the one a job of
// another layout would have written: one set of files per rank of that layout, each rank's part
// read from the input by load_pieces (resharding) and written as that rank would write it
// (checkpoint/placement.h). Only one rank's part is in memory at a time. Any checkpoint loads
// under any layout anyway; converting moves the resharding off the job's start, and lets a job
// of the new layout read only its own files.

#include <string>

#include "weft/core/status.h"
#include "weft/layout/layout.h"

namespace weft::checkpoint {

// Writes checkpoint IN (a directory, or a root holding `latest`) under root OUT as layout `to`
// (OUT/step_<step> and OUT/latest). Every problem of `to` for this model at once. Returns the new
// checkpoint directory.
Result<std::string> convert(const std::string& in, const std::string& out_root,
                            const layout::Layout& to);

}  // namespace weft::checkpoint
