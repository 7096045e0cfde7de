#include "codegen/cache_dir.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>

#include "codegen/toolchain.h"

namespace trident::codegen {
namespace {

std::mutex g_mu;  // guards everything below
std::vector<std::string> g_pending;
std::set<std::string> g_said;
std::string g_fallback;  // this process's private temporary directory, once made

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : "";
}

// Why `dir` is not a private directory of ours (empty when it is).
std::string untrusted_dir_reason(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "it is not a directory";
  if (st.st_uid != geteuid()) return "it is owned by uid " + std::to_string(st.st_uid) + ", not by this user";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "it is writable by group or others";
  if (access(dir.c_str(), W_OK | X_OK) != 0) return "it is not writable";
  return "";
}

// Creates every missing component 0700; the last one is then checked by the caller.
void make_dirs(const std::string& path) {
  for (size_t p = 1; p <= path.size(); ++p)
    if (p == path.size() || path[p] == '/') mkdir(path.substr(0, p).c_str(), 0700);
}

std::string fallback_dir() {
  if (!g_fallback.empty() && untrusted_dir_reason(g_fallback).empty()) return g_fallback;
  std::string base = env("TMPDIR");
  if (base.empty()) base = "/tmp";
  std::string tmpl = base + "/trident-" + std::to_string(geteuid()) + "-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    throw ToolchainError("no usable cache directory and cannot create a private temporary one in " + base + ": " +
                         std::strerror(errno));
  g_fallback = tmpl;
  return g_fallback;
}

void warn_locked(const std::string& message) {
  if (g_said.insert(message).second) g_pending.push_back(message);
}

}  // namespace

std::string configured_cache_dir() {
  std::string dir = env("TRIDENT_CACHE_DIR");
  if (!dir.empty()) return dir;
  std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/trident";
  std::string home = env("HOME");
  if (home.empty()) {
    if (const passwd* pw = getpwuid(geteuid()); pw && pw->pw_dir && *pw->pw_dir) home = pw->pw_dir;
  }
  return home.empty() ? "" : home + "/.cache/trident";
}

std::string cache_subdir(const std::string& sub) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string root = configured_cache_dir();
  std::string why = root.empty() ? "no home directory is known" : "";
  if (why.empty()) {
    make_dirs(root + "/" + sub);
    why = untrusted_dir_reason(root);
    if (why.empty()) why = untrusted_dir_reason(root + "/" + sub);
  }
  if (why.empty()) return root + "/" + sub;
  std::string dir = fallback_dir() + "/" + sub;
  mkdir(dir.c_str(), 0700);
  warn_locked("trident: not using the cache directory " + (root.empty() ? std::string("(none)") : root) + " (" +
              why + "); compiled modules go to the private directory " + g_fallback +
              " for this process (set TRIDENT_CACHE_DIR to a directory only you can write)");
  return dir;
}

std::string read_private_file(const std::string& path, std::string& content) {
  content.clear();
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno == ELOOP ? "it is a symbolic link" : std::string("cannot open it: ") + std::strerror(errno);
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0) why = std::string("cannot stat it: ") + std::strerror(errno);
  else if (!S_ISREG(st.st_mode)) why = "it is not a regular file";
  else if (st.st_uid != geteuid()) why = "it is owned by uid " + std::to_string(st.st_uid) + ", not by this user";
  else if (st.st_mode & (S_IWGRP | S_IWOTH)) why = "it is writable by group or others";
  char buf[1 << 16];
  while (why.empty()) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) why = std::string("cannot read it: ") + std::strerror(errno);
    if (n <= 0) break;
    content.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  if (!why.empty()) content.clear();
  return why;
}

std::vector<std::string> take_cache_warnings() {
  std::lock_guard<std::mutex> lock(g_mu);
  return std::exchange(g_pending, {});
}

void add_cache_warning(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mu);
  warn_locked(message);
}

}  // namespace trident::codegen
