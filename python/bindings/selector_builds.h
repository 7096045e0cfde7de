// Decision programs compiled off the miss path. A miss adds its specialization as soon as the
// spec's own object is loaded; when the selector's object (which changes with every added spec)
// is not ready by then, the module serves calls with its guards interpreted
// (LoadedModule::by_guards, the same answers) and the first call after the compiler finishes
// installs the compiled selector (scm_object.cpp: install_selector). The miss then costs the spec's
// object only, whatever the module holds.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "codegen/toolchain.h"

namespace trident::bindings {

// One selector compile on a thread of its own. It holds only its source and its result, so a
// module dropped meanwhile loses nothing by it, and the thread touches nothing of Python.
class SelectorBuild {
 public:
  // Starts compiling `source` (codegen::build_module) now.
  static std::shared_ptr<SelectorBuild> start(std::string source);

  // Whether the compile finished (its result or its error is then final). A build started in the
  // process this one was forked from never finishes here (its thread did not fork): `orphaned`.
  bool done() const;
  bool orphaned() const;
  // Waits up to `limit` for done(); whether it finished.
  bool wait(std::chrono::milliseconds limit) const;

  const std::string& source() const { return source_; }
  // Valid once done(): the object, or why it could not be built (then `built` is empty).
  const codegen::BuiltModule& built() const { return built_; }
  const std::string& error() const { return error_; }

 private:
  std::string source_;
  codegen::BuiltModule built_;
  std::string error_;
  pid_t pid_ = 0;
  mutable std::mutex mu_;  // for wait(); done_ is read without it (a forked child may find it held)
  mutable std::condition_variable cv_;
  std::atomic<bool> done_{false};  // set after built_ and error_, released
};

// Waits (up to a minute) for every build still running: registered with Py_AtExit, so that no
// build thread is inside the toolchain while the process's static objects are destroyed.
void wait_for_selector_builds();

}  // namespace trident::bindings
