#include "codegen/toolchain.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace trident::codegen {
namespace {

// Optimisation is cheap here: the modules are integer code and calls, a few hundred lines.
const char* kFlags = "-std=c11 -O2 -fPIC -shared -fvisibility=hidden -w";

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

void make_dirs(const std::string& path) {
  for (size_t p = 1; p <= path.size(); ++p) {
    if (p == path.size() || path[p] == '/') {
      std::string part = path.substr(0, p);
      if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
        throw ToolchainError("cannot create cache directory " + part + ": " + std::strerror(errno));
    }
  }
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// stdio rather than iostreams: the core stays free of locale/iostream static state.
void write_file(const std::string& path, const std::string& data) {
  FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f && std::fwrite(data.data(), 1, data.size(), f) == data.size();
  if (f) ok = std::fclose(f) == 0 && ok;
  if (!ok) throw ToolchainError("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::string s;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
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

std::string cache_dir() {
  std::string dir = env_or("TRIDENT_CACHE_DIR", "");
  if (!dir.empty()) return dir;
  std::string xdg = env_or("XDG_CACHE_HOME", "");
  if (!xdg.empty()) return xdg + "/trident";
  return env_or("HOME", "/tmp") + "/.cache/trident";
}

BuiltModule build_module(const std::string& c_source) {
  std::string cc = env_or("TRIDENT_CC", env_or("CC", "cc"));
  std::string hash = content_hash(cc + "\n" + kFlags + "\n" + c_source);
  std::string dir = cache_dir() + "/modules";
  make_dirs(dir);
  BuiltModule out;
  out.source_path = dir + "/scm_" + hash + ".c";
  out.so_path = dir + "/scm_" + hash + ".so";
  if (exists(out.so_path)) {
    out.cache_hit = true;
    return out;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::string tag = "." + std::to_string(getpid()) + ".tmp";
  write_file(out.source_path + tag, c_source);
  std::rename((out.source_path + tag).c_str(), out.source_path.c_str());
  std::string log = out.so_path + tag + ".log";
  std::string cmd = cc + " " + kFlags + " -o '" + out.so_path + tag + "' '" + out.source_path + "' > '" + log +
                    "' 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc != 0) {
    std::string msg = read_file(log);
    std::remove(log.c_str());
    std::remove((out.so_path + tag).c_str());
    throw ToolchainError("compiling the generated module failed (" + cmd + "):\n" + msg.substr(0, 4000));
  }
  std::remove(log.c_str());
  if (std::rename((out.so_path + tag).c_str(), out.so_path.c_str()) != 0)
    throw ToolchainError("cannot move the compiled module into " + out.so_path);
  out.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace trident::codegen
