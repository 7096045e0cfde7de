#include "codegen/toolchain.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "codegen/cache_dir.h"
#include "codegen/sha256.h"

extern char** environ;

namespace trident::codegen {
namespace {

// Optimisation is cheap here: the modules are integer code and calls, a few hundred lines.
// gnu11, not c11: ISO modes turn trigraphs on, and no spelling of generated text should depend on
// them being off (ir::quote escapes '?' as well).
const char* kFlags = "-std=gnu11 -O2 -fPIC -shared -fvisibility=hidden -w";
const char* kRecordMagic = "trident-module-record 1";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p < s.size()) {
    while (p < s.size() && s[p] == ' ') ++p;
    size_t e = s.find(' ', p);
    if (e == std::string::npos) e = s.size();
    if (e > p) out.push_back(s.substr(p, e - p));
    p = e;
  }
  return out;
}

// A new file only we can read, written whole; stdio-free so the mode is set at creation.
void write_private(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  bool ok = fd >= 0;
  for (size_t off = 0; ok && off < data.size();) {
    ssize_t n = write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    off += ok ? static_cast<size_t>(n) : 0;
  }
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (!ok) {
    unlink(path.c_str());
    throw ToolchainError("cannot write " + path + ": " + std::strerror(errno));
  }
}

std::string record_text(const std::string& key, const std::string& object) {
  return std::string(kRecordMagic) + "\nkey " + key + "\nsha256 " + sha256_hex(object) + "\nbytes " +
         std::to_string(object.size()) + "\n";
}

// Why the cached object at so_path may not be used for `key` (empty when it may).
std::string cached_object_reason(const std::string& so_path, const std::string& record_path, const std::string& key) {
  std::string record, object;
  if (std::string why = read_private_file(record_path, record); !why.empty()) return "its record: " + why;
  if (std::string why = read_private_file(so_path, object); !why.empty()) return why;
  if (record != record_text(key, object)) return "its bytes do not match the record made when it was built";
  return "";
}

// Runs argv with stdout and stderr into log_path; returns the exit status (or -1 and errno). The
// compiler runs under umask 077, so the object it creates is private from its first byte whatever
// the caller's umask (the process's umask is shared by all its threads: a build off the miss path
// while the user has umask 0 would otherwise create it world-writable until our chmod). The shell
// gets argv as its positional parameters, never as text of its script.
int run_compiler(const std::vector<std::string>& argv, const std::string& log_path) {
  static const char* kPrivate[] = {"/bin/sh", "-c", "umask 077 && exec \"$@\"", "trident-cc"};
  std::vector<char*> args;
  for (const char* a : kPrivate) args.push_back(const_cast<char*>(a));
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    errno = rc;
    return -1;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

std::string shown(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Moves `from` onto `to`, removing whatever entry (file, empty directory) stands there first.
bool move_into_place(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return true;
  if (unlink(to.c_str()) != 0) rmdir(to.c_str());
  return std::rename(from.c_str(), to.c_str()) == 0;
}

}  // namespace

std::string content_hash(const std::string& data) {
  uint64_t a = 1469598103934665603ull, b = 0x84222325cbf29ce4ull;
  for (unsigned char c : data) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 0x100000001b3ull;
    b ^= b >> 29;
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return buf;
}

std::string cache_dir() { return configured_cache_dir(); }

BuiltModule build_module(const std::string& c_source, bool rebuild) {
  std::string cc = env_or("TRIDENT_CC", env_or("CC", "cc"));
  std::string key = content_hash(cc + "\n" + kFlags + "\n" + c_source);
  std::string dir = cache_subdir("modules");
  BuiltModule out;
  out.source_path = dir + "/scm_" + key + ".c";
  out.so_path = dir + "/scm_" + key + ".so";
  std::string record_path = dir + "/scm_" + key + ".record";
  struct stat st;
  bool present = lstat(out.so_path.c_str(), &st) == 0;
  if (present && !rebuild) {
    std::string why = cached_object_reason(out.so_path, record_path, key);
    if (why.empty()) {
      out.cache_hit = true;
      return out;
    }
    add_cache_warning("trident: the cached module " + out.so_path + " was not loaded (" + why + "); rebuilt it");
  }
  auto t0 = std::chrono::steady_clock::now();
  // Unique per build: several threads of a process may build (selectors compile off the miss path).
  static std::atomic<uint64_t> builds{0};
  std::string tag = "." + std::to_string(getpid()) + "." + std::to_string(builds.fetch_add(1)) + "." +
                    std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".tmp";
  write_private(out.source_path + tag, c_source);
  if (!move_into_place(out.source_path + tag, out.source_path)) out.source_path += tag;
  std::string tmp_so = out.so_path + tag, log = out.so_path + tag + ".log";
  std::vector<std::string> argv = split_words(cc);
  if (argv.empty()) throw ToolchainError("TRIDENT_CC/CC names no compiler");
  for (auto& f : split_words(kFlags)) argv.push_back(f);
  for (const char* a : {"-o", tmp_so.c_str(), out.source_path.c_str()}) argv.push_back(a);
  int rc = run_compiler(argv, log);
  if (rc != 0) {
    std::string why;
    if (rc < 0) why = std::string("cannot start it: ") + std::strerror(errno);
    else read_private_file(log, why);  // the compiler's output, from the 0600 log it wrote
    unlink(log.c_str());
    unlink(tmp_so.c_str());
    throw ToolchainError("compiling the generated module failed (" + shown(argv) + "):\n" + why.substr(0, 4000));
  }
  unlink(log.c_str());
  chmod(tmp_so.c_str(), 0600);
  std::string object;
  if (std::string why = read_private_file(tmp_so, object); !why.empty())
    throw ToolchainError("the compiled module " + tmp_so + " cannot be read back: " + why);
  std::string record_tmp = record_path + tag;
  write_private(record_tmp, record_text(key, object));
  // The record first: an object in place always has its record (a reader racing us sees a record
  // that does not match the old object and rebuilds, never the reverse).
  if (!move_into_place(record_tmp, record_path) || !move_into_place(tmp_so, out.so_path)) {
    unlink(record_tmp.c_str());
    out.so_path = tmp_so;  // something we cannot remove is in the way: load our own copy
  }
  out.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace trident::codegen
