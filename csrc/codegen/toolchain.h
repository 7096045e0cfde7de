// Toolchain: turn generated C into a loadable shared object, cached on disk by content hash.
//
// The key hashes the source (which embeds the ABI header and so its version), the compiler command
// and the flags: a second process that generates the same module loads the cached object without
// compiling. Objects are written to a temporary name and renamed into place, so concurrent
// processes never load a half-written file.
#pragma once

#include <stdexcept>
#include <string>

namespace trident::codegen {

struct ToolchainError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct BuiltModule {
  std::string so_path;
  std::string source_path;
  bool cache_hit = false;
  double compile_seconds = 0.0;
};

// Cache directory: $TRIDENT_CACHE_DIR, else $XDG_CACHE_HOME/trident, else ~/.cache/trident.
std::string cache_dir();

// Compiler: $TRIDENT_CC, else $CC, else "cc".
BuiltModule build_module(const std::string& c_source);

// 128-bit content hash as 32 hex digits (two independent 64-bit FNV-1a lanes).
std::string content_hash(const std::string& data);

}  // namespace trident::codegen
