// The on-disk cache (built modules, Triton cubins): a directory private to the effective user.
//
// Where: $TRIDENT_CACHE_DIR, else $XDG_CACHE_HOME/trident, else $HOME/.cache/trident, else the
// passwd entry's home directory; never a shared temporary directory. Directories are created 0700.
// A directory is used only when it is a directory (or a link to one) owned by the effective user,
// not writable by group or others, and writable by us; otherwise trident warns once and uses a
// fresh private directory of this process (mkdtemp, 0700), so the function still runs.
//
// Nothing is loaded from the cache before it passes read_private_file() and the caller's own check of
// its content (toolchain.cpp: a recorded SHA-256).
#pragma once

#include <string>
#include <vector>

namespace trident::codegen {

// The validated directory `sub` ("modules", "cubins") of the cache, created if needed. Throws
// ToolchainError only when not even a private temporary directory can be made.
std::string cache_subdir(const std::string& sub);

// The cache root as configured (not validated): what `trident._C.cache_dir()` reports.
std::string configured_cache_dir();

// Reads `path` into `content` if it may be trusted, else says why not (empty on success): it must
// be a regular file (not a link, FIFO, device or directory) owned by the effective user and writable
// by nobody else. Opened without following links and without blocking, checked on the open file.
std::string read_private_file(const std::string& path, std::string& content);

// Warnings raised since the last call (an unusable cache directory, a rejected entry), each once per
// process; the bindings turn them into Python warnings.
std::vector<std::string> take_cache_warnings();
void add_cache_warning(const std::string& message);

}  // namespace trident::codegen
