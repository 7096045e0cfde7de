#include "selector_builds.h"

#include <pthread.h>
#include <unistd.h>

#include <thread>

namespace trident::bindings {
namespace {

// Builds running; an atomic, not a mutex, so that a child forked while one is held is not stuck.
std::atomic<int> g_running{0};

// A forked child has none of the parent's build threads: none of them is running there.
const int g_at_fork = pthread_atfork(nullptr, nullptr, [] { g_running.store(0); });

}  // namespace

std::shared_ptr<SelectorBuild> SelectorBuild::start(std::string source) {
  auto b = std::make_shared<SelectorBuild>();
  b->source_ = std::move(source);
  b->pid_ = getpid();
  ++g_running;
  std::thread([b] {
    codegen::BuiltModule built;
    std::string error;
    try {
      built = codegen::build_module(b->source_);
    } catch (const std::exception& e) {
      error = e.what()[0] ? e.what() : "unknown error";
    }
    b->built_ = std::move(built);  // read by others only once done_ says so
    b->error_ = std::move(error);
    {
      std::lock_guard<std::mutex> lock(b->mu_);
      b->done_.store(true, std::memory_order_release);
    }
    b->cv_.notify_all();
    --g_running;
  }).detach();
  return b;
}

bool SelectorBuild::done() const { return done_.load(std::memory_order_acquire); }

bool SelectorBuild::orphaned() const { return pid_ != getpid() && !done(); }

bool SelectorBuild::wait(std::chrono::milliseconds limit) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, limit, [&] { return done(); });
}

void wait_for_selector_builds() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (g_running.load() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
}

}  // namespace trident::bindings
