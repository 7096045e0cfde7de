// Toolchain: turn generated C into a loadable shared object, cached on disk by content hash.
//
// The key hashes the source (which embeds the ABI header and so its version), the compiler command
// and the flags: a second process that generates the same module loads the cached object without
// compiling. Objects are written to a temporary name and renamed into place, so concurrent
// processes never load a half-written file.
//
// Trust: the cache lives in a directory private to the user (cache_dir.h). Beside every object,
// a record names its key and the SHA-256 of the bytes the compiler wrote; a cached object is used
// only when it is a regular file of ours whose bytes match its record for this key. Anything else
// (truncated, altered, another module's object, a FIFO, a directory, no record) is rebuilt, with
// one warning. The compiler is started from an argument vector, never through a shell.
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

// The cache root as configured (see cache_dir.h; validated when used).
std::string cache_dir();

// Compiler: $TRIDENT_CC, else $CC, else "cc" (split on spaces into program and arguments, no shell).
// `rebuild`: ignore a cached object (the caller found it would not load) and build it again.
BuiltModule build_module(const std::string& c_source, bool rebuild = false);

// 128-bit content hash as 32 hex digits (two independent 64-bit FNV-1a lanes).
std::string content_hash(const std::string& data);

}  // namespace trident::codegen
