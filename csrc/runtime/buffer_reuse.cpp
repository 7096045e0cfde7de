#include "runtime/buffer_reuse.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>

namespace trident::runtime {
namespace {

bool held_elsewhere(const at::Tensor& t) { return t.use_count() != 1 || t.storage().use_count() != 1; }

}  // namespace

int64_t ReusePool::budget() {
  static const int64_t bytes = [] {
    const char* v = std::getenv("TRIDENT_KEPT_BYTES");
    if (v == nullptr || *v == '\0') return kDefaultBudget;
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    return *end == '\0' && n >= 0 ? static_cast<int64_t>(n) : kDefaultBudget;  // config.py raises first
  }();
  return bytes;
}

std::optional<c10::Stream> current_stream(c10::Device device) {
  if (device.is_cpu()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

bool ReusePool::serves(const Entry& e, int32_t kind, const Key& key) const {
  // An inference tensor (made under torch.inference_mode) cannot be written outside it, and a run
  // under it makes inference tensors: a buffer serves runs of the mode it was made in.
  return e.t.defined() && e.kind == kind && e.key == key && !held_elsewhere(e.t) &&
         current_stream(e.t.device()) == e.stream && e.t.is_inference() == c10::InferenceMode::is_enabled();
}

at::Tensor* ReusePool::take(Site& site, const Key& key) {
  if (site.escaped) return nullptr;
  int32_t found = site.hint >= 0 && serves(entries_[site.hint], site.kind, key) ? site.hint : -1;
  for (int32_t i = 0; found < 0 && i < static_cast<int32_t>(entries_.size()); ++i)
    if (serves(entries_[i], site.kind, key)) found = i;
  if (found < 0) return nullptr;
  point(site, found);
  entries_[found].last = &site;
  return &entries_[found].t;
}

void ReusePool::keep(Site& site, const at::Tensor& t, Key key) {
  if (site.escaped) return;
  const int64_t bytes = static_cast<int64_t>(t.storage().nbytes());
  if (bytes > kMaxBytes) return;
  int32_t i = site.hint;
  // Refill the site's own entry (a changed size replaces the old buffer); an entry other sites
  // point at, or one in use now, stays as it is and the site moves to a new one.
  const bool own = i >= 0 && entries_[i].pointing == 1 &&
                   !(entries_[i].t.defined() && held_elsewhere(entries_[i].t));
  if (own) empty(entries_[i]);
  if (bytes_ + bytes > budget()) return;
  if (!own) {
    i = new_entry();
    point(site, i);
  }
  Entry& e = entries_[i];
  e.t = t;
  e.kind = site.kind;
  e.key = std::move(key);
  e.stream = current_stream(t.device());
  e.bytes = bytes;
  e.last = &site;
  bytes_ += bytes;
}

void ReusePool::check_escapes() {
  for (Entry& e : entries_) {
    if (!e.t.defined() || !held_elsewhere(e.t)) continue;
    Site* culprit = e.last;
    empty(e);
    if (culprit) {
      culprit->escaped = true;
      point(*culprit, -1);
    }
  }
}

int64_t ReusePool::buffers() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.t.defined();
  return n;
}

// Moves the site's hint to `entry` (-1: nowhere); an entry left with no site pointing at it is
// emptied and becomes vacant.
void ReusePool::point(Site& site, int32_t entry) {
  if (site.hint == entry) return;
  if (site.hint >= 0 && --entries_[site.hint].pointing == 0) {
    empty(entries_[site.hint]);
    vacant_.push_back(site.hint);
  }
  site.hint = entry;
  if (entry >= 0) ++entries_[entry].pointing;
}

void ReusePool::empty(Entry& e) {
  if (!e.t.defined()) return;
  bytes_ -= e.bytes;
  e.t.reset();
  e.bytes = 0;
  e.last = nullptr;
}

int32_t ReusePool::new_entry() {
  if (!vacant_.empty()) {
    const int32_t i = vacant_.back();
    vacant_.pop_back();
    return i;
  }
  entries_.emplace_back();
  return static_cast<int32_t>(entries_.size() - 1);
}

}  // namespace trident::runtime
