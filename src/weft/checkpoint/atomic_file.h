#pragma once
// Durable, all-or-nothing file writes: a reader (or the next run after a crash) sees either the old
// file or the complete new one, never half of it (DESIGN.md §5: nothing a user owns is overwritten
// by a failed run). The runtime writes its loss.svg and metrics rewrites through here too.

#include <string>
#include <string_view>

#include "weft/core/status.h"

namespace weft::checkpoint {

// Writes `content` to PATH.tmp-<pid>, fsyncs it, renames it onto PATH and fsyncs the directory.
// On failure the temporary is removed and PATH is left as it was. Errors name PATH.
Status write_file_atomic(const std::string& path, std::string_view content);

// fsync() of a file or a directory (a rename is durable only once its directory is synced).
Status fsync_path(const std::string& path);

}  // namespace weft::checkpoint
