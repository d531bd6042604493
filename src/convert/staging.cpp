#include "convert/staging.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "util/error.h"

namespace nibble {

namespace fs = std::filesystem;

namespace {

// The temporary folder's name: hidden, derived from DST, and carrying the
// pid so that a later run can tell a folder left by a killed process (kill -9
// cannot be cleaned up after) from one being written right now.
std::string tmp_prefix(const std::string& dst_name) { return "." + dst_name + ".nibble-convert-"; }

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin(), o = outer.begin();
  for (; o != outer.end(); ++o, ++i)
    if (i == inner.end() || *i != *o) return false;
  return true;
}

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Removes temporary folders of earlier runs whose process no longer exists.
void remove_stale(const std::string& parent, const std::string& prefix) {
  std::error_code ec;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    const long pid = std::strtol(rest.c_str(), nullptr, 10);
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) == 0 || errno == EPERM) continue;  // still running
    remove_tree_quietly(it->path().string());
  }
}

// renameat2(RENAME_EXCHANGE) swaps two paths atomically (Linux >= 3.15;
// most local file systems). Returns false where it is not supported.
bool exchange_paths(const std::string& a, const std::string& b) {
#ifdef RENAME_EXCHANGE
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    fail("cannot swap ", a, " into place as ", b, ": ", std::strerror(errno));
  return false;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

}  // namespace

void remove_tree_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

OutputStaging::OutputStaging(const std::string& src, const std::string& dst, bool force) : force_(force) {
  if (dst.empty()) fail("DST is empty");
  std::error_code ec;
  fs::path src_abs = fs::weakly_canonical(fs::absolute(src), ec);
  if (ec) fail(src, ": ", ec.message());
  fs::path dst_abs = fs::weakly_canonical(fs::absolute(dst), ec);
  if (ec) fail(dst, ": ", ec.message());
  if (dst_abs.filename().empty()) dst_abs = dst_abs.parent_path();  // "out/" -> "out"
  if (is_within(dst_abs, src_abs)) fail("DST ", dst, " is SRC or inside it; nibble convert never writes into SRC");
  if (is_within(src_abs, dst_abs)) fail("DST ", dst, " contains SRC ", src, "; choose another DST");
  dst_ = dst_abs.string();
  parent_ = dst_abs.parent_path().string();

  fs::file_status st = fs::status(parent_, ec);
  if (!fs::exists(st)) fail("DST's parent folder ", parent_, " does not exist");
  if (!fs::is_directory(st)) fail("DST's parent ", parent_, " is not a folder");
  st = fs::symlink_status(dst_abs, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(fs::status(dst_abs, ec))) fail("DST ", dst, " exists and is not a folder");
    if (!fs::is_empty(dst_abs, ec)) {
      if (!force_) fail("DST ", dst, " exists and is not empty (--force replaces it once the conversion succeeds)");
      replaces_ = true;
    }
  }

  const std::string prefix = tmp_prefix(dst_abs.filename().string());
  remove_stale(parent_, prefix);
  std::random_device rd;
  for (int attempt = 0; attempt < 16; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%ld-%08x", long(::getpid()), unsigned(rd()));
    std::string candidate = (fs::path(parent_) / (prefix + suffix)).string();
    if (::mkdir(candidate.c_str(), 0755) == 0) {
      tmp_ = candidate;
      return;
    }
    if (errno != EEXIST) fail("cannot create a folder beside DST (", candidate, "): ", std::strerror(errno));
  }
  fail("cannot create a temporary folder in ", parent_);
}

OutputStaging::~OutputStaging() {
  if (!committed_ && !tmp_.empty()) remove_tree_quietly(tmp_);
}

void OutputStaging::commit() {
  if (committed_) fail(dst_, ": committed twice");
  fsync_dir(tmp_);
  std::error_code ec;
  const bool dst_exists = fs::exists(fs::symlink_status(dst_, ec));
  if (!dst_exists || fs::is_empty(dst_, ec)) {
    // rename(2) replaces an empty folder atomically and fails on a non-empty one.
    if (::rename(tmp_.c_str(), dst_.c_str()) != 0)
      fail("cannot rename ", tmp_, " to ", dst_, ": ", std::strerror(errno));
  } else {
    if (!force_) fail("DST ", dst_, " became non-empty during the conversion; it was left as it is");
    if (exchange_paths(tmp_, dst_)) {  // not `exchange`: std::exchange would win by ADL on std::string
      // tmp_ now holds the old DST.
      committed_ = true;
      remove_tree_quietly(tmp_);
      fsync_dir(parent_);
      return;
    }
    // No atomic exchange here: move the old DST aside, move the new one in,
    // and put the old one back if that fails.
    std::string old = tmp_ + ".old";
    if (::rename(dst_.c_str(), old.c_str()) != 0)
      fail("cannot move the old DST ", dst_, " aside: ", std::strerror(errno));
    if (::rename(tmp_.c_str(), dst_.c_str()) != 0) {
      int err = errno;
      ::rename(old.c_str(), dst_.c_str());
      fail("cannot rename ", tmp_, " to ", dst_, ": ", std::strerror(err));
    }
    remove_tree_quietly(old);
  }
  committed_ = true;
  fsync_dir(parent_);
}

uint64_t copy_file_synced(const std::string& from, const std::string& to) {
  int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) fail(from, ": cannot open: ", std::strerror(errno));
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (out < 0) {
    int err = errno;
    ::close(in);
    fail(to, ": cannot create: ", std::strerror(err));
  }
  std::vector<char> buf(size_t(4) << 20);
  uint64_t total = 0;
  auto close_both = [&] {
    ::close(in);
    ::close(out);
  };
  for (;;) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close_both();
      fail(from, ": read failed: ", std::strerror(err));
    }
    if (n == 0) break;
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(out, buf.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        int err = errno;
        close_both();
        fail(to, ": write failed: ", std::strerror(err));
      }
      done += w;
    }
    total += uint64_t(n);
  }
  if (::fsync(out) != 0) {
    int err = errno;
    close_both();
    fail(to, ": fsync failed: ", std::strerror(err));
  }
  ::close(in);
  if (::close(out) != 0) fail(to, ": close failed: ", std::strerror(errno));
  return total;
}

}  // namespace nibble
