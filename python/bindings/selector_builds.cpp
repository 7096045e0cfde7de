#include "selector_builds.h"

#include <pthread.h>
#include <unistd.h>

#include <thread>

namespace trident::bindings {
namespace {

std::mutex g_mu;  // guards g_running
std::condition_variable g_cv;
int g_running = 0;

// A forked child has none of the parent's build threads: none of them is running there.
const int g_at_fork = pthread_atfork(nullptr, nullptr, [] { g_running = 0; });

}  // namespace

std::shared_ptr<SelectorBuild> SelectorBuild::start(std::string source) {
  auto b = std::make_shared<SelectorBuild>();
  b->source_ = std::move(source);
  b->pid_ = getpid();
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_running;
  }
  std::thread([b] {
    codegen::BuiltModule built;
    std::string error;
    try {
      built = codegen::build_module(b->source_);
    } catch (const std::exception& e) {
      error = e.what()[0] ? e.what() : "unknown error";
    }
    {
      std::lock_guard<std::mutex> lock(b->mu_);
      b->built_ = std::move(built);
      b->error_ = std::move(error);
      b->done_ = true;
    }
    b->cv_.notify_all();
    std::lock_guard<std::mutex> lock(g_mu);
    --g_running;
    g_cv.notify_all();
  }).detach();
  return b;
}

bool SelectorBuild::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool SelectorBuild::orphaned() const { return pid_ != getpid() && !done(); }

bool SelectorBuild::wait(std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return done_; });
}

void wait_for_selector_builds() {
  std::unique_lock<std::mutex> lock(g_mu);
  g_cv.wait_for(lock, std::chrono::minutes(1), [] { return g_running == 0; });
}

}  // namespace trident::bindings
