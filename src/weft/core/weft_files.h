#pragma once
// weft's own files (configs/, and what scripts/fetch_assets.sh puts beside them) wherever weft is
// started: a relative path names them from the repository root, as the README's commands run, and
// weft looks for them there when the working directory is elsewhere. `mpirun -n 2 weft tune
// /abs/path/run.toml` from another directory failed on its default cluster preset
// (configs/clusters/this-machine.toml) and on the run config's model.config.

#include <string>

namespace weft {

// `path` itself when it is absolute or names a file or directory from the working directory;
// else the first that exists of $WEFT_HOME/path, <root>/path for the repository the running
// binary was built in (it lives in <root>/build/<preset>/bin/), and <source>/path for the source
// tree it was compiled from; else `path` unchanged (so an error names what was asked for).
std::string find_weft_file(const std::string& path);

}  // namespace weft
