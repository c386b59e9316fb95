#include "support/file_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "support/check.hpp"

namespace graft::support {
namespace {

std::string osError(int err) { return std::strerror(err); }

const char* kindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

// Removes the temporary file unless the write reached the rename.
struct TempFile {
  std::string path;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!keep && !path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

void checkRegularFile(std::string_view what, const std::string& path) {
  GRAFT_CHECK(!path.empty(), "{}: the path is empty", what);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    struct stat lst {};
    if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0)
      GRAFT_THROW("{} '{}' is a symbolic link to a file that does not exist", what, path);
    GRAFT_CHECK(err != ENOENT, "{} '{}' does not exist", what, path);
    GRAFT_THROW("{} '{}' cannot be read: {}", what, path, osError(err));
  }
  GRAFT_CHECK(S_ISREG(st.st_mode), "{} '{}' is {}, not a regular file", what, path, kindOf(st.st_mode));
}

void writeFileAtomically(std::string_view what, const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  GRAFT_CHECK(!path.empty(), "{}: the path is empty", what);
  fs::path target(path);
  GRAFT_CHECK(target.has_filename(), "{} '{}' names a folder, not a file", what, path);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    GRAFT_CHECK(S_ISREG(st.st_mode), "{} '{}' is {}; it cannot be replaced by a file", what, path, kindOf(st.st_mode));
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";

  // A unique name per process and call: writers of one path never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  TempFile tmp;
  for (int attempt = 0; attempt < 16 && tmp.fd < 0; ++attempt) {
    tmp.path =
        (dir / fmt::format(".{}.tmp.{}.{:x}{:x}", target.filename().string(), ::getpid(), counter++, rd())).string();
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (tmp.fd < 0 && errno != EEXIST) {
      int err = errno;
      tmp.path.clear();  // nothing of ours to remove
      GRAFT_THROW("{}: cannot create a temporary file in '{}' for '{}': {}", what, dir.string(), path, osError(err));
    }
  }
  GRAFT_CHECK(tmp.fd >= 0, "{}: cannot create a unique temporary file in '{}'", what, dir.string());

  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(tmp.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    GRAFT_CHECK(n > 0, "{}: cannot write '{}': {}", what, tmp.path, osError(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
  GRAFT_CHECK(::fsync(tmp.fd) == 0, "{}: cannot flush '{}' to disk: {}", what, tmp.path, osError(errno));
  int fd = tmp.fd;
  tmp.fd = -1;
  GRAFT_CHECK(::close(fd) == 0, "{}: cannot close '{}': {}", what, tmp.path, osError(errno));
  GRAFT_CHECK(::rename(tmp.path.c_str(), path.c_str()) == 0, "{}: cannot rename '{}' to '{}': {}", what, tmp.path, path,
              osError(errno));
  tmp.keep = true;
  // The rename itself survives a crash once the folder is synced too (best effort: some file
  // systems refuse fsync on a folder).
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace graft::support
