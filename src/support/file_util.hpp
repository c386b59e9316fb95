#pragma once
// Files the user names: checked before any open can block (a FIFO, a device), and written so that
// a reader never sees a torn file.
#include <string>
#include <string_view>

namespace graft::support {

/// Throws graft::Error unless `path` names a regular file (symbolic links are followed):
/// "<what> '<path>' does not exist" only when nothing is there; a directory, FIFO, socket or
/// device is named as such. Never opens the file, so it cannot block.
void checkRegularFile(std::string_view what, const std::string& path);

/// Writes `bytes` to `path` atomically: a new temporary file in the same folder (a unique name,
/// opened with O_CREAT | O_EXCL | O_NOFOLLOW, so a planted file or symbolic link is never
/// followed), fsync, then rename over `path`. Concurrent writers of one path are safe: the last
/// rename wins and readers see one whole file or another, never a torn one. On any failure the
/// temporary file is removed and graft::Error names `what`, the path and the OS error.
void writeFileAtomically(std::string_view what, const std::string& path, std::string_view bytes);

}  // namespace graft::support
