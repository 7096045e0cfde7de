#include "runtime/buffer_reuse.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>

namespace trident::runtime {
namespace {

bool held_elsewhere(const at::Tensor& t) { return t.use_count() != 1 || t.storage().use_count() != 1; }

// A new TensorImpl over t's storage with t's metadata, no autograd history and no Python object.
at::Tensor detached(const at::Tensor& t) {
  return at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(c10::VariableVersion(0),
                                                                     /*allow_tensor_metadata_change=*/true));
}

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
  // Memory that went out with a result serves only as it was kept: the caller may have resized the
  // storage (resize_ moves it to a larger allocation; untyped_storage().resize_(0) frees it).
  return e.t.defined() && e.kind == kind && e.key == key && !held_elsewhere(e.t) &&
         current_stream(e.t.device()) == e.stream && e.t.is_inference() == c10::InferenceMode::is_enabled() &&
         (!e.handed_out || (e.t.storage().nbytes() == static_cast<size_t>(e.bytes) && e.t.storage().data() == e.data));
}

at::Tensor* ReusePool::take(Site& site, const Key& key) {
  if (site.escaped) return nullptr;
  int32_t found = site.hint >= 0 && serves(entries_[site.hint], site.kind, key) ? site.hint : -1;
  if (found < 0 && site.spare >= 0 && serves(entries_[site.spare], site.kind, key)) {
    std::swap(site.hint, site.spare);  // the result over the old hint is still alive: it waits as spare
    found = site.hint;
  }
  for (int32_t i = 0; found < 0 && i < static_cast<int32_t>(entries_.size()); ++i)
    if (serves(entries_[i], site.kind, key)) found = i;
  if (found < 0) return nullptr;
  point(site, found);
  Entry& e = entries_[found];
  e.last = &site;
  recycled_ += e.handed_out;
  e.handed_out = false;  // check_escapes marks it again if it goes out again
  return &e.t;
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
    const bool outgoing = site.hint >= 0 && entries_[site.hint].handed_out && entries_[site.hint].pointing == 1;
    if (outgoing) {  // the caller still holds the site's last result: its memory waits as the spare
      if (site.spare >= 0) unpoint(site.spare);
      site.spare = site.hint;
      site.hint = i;
      ++entries_[i].pointing;
    } else {
      point(site, i);
    }
  }
  Entry& e = entries_[i];
  e.t = t;
  e.kind = site.kind;
  e.key = std::move(key);
  e.stream = current_stream(t.device());
  e.bytes = bytes;
  e.last = &site;
  e.data = t.storage().data();
  e.handed_out = false;
  bytes_ += bytes;
}

void ReusePool::check_escapes(bool recycle_outputs) {
  for (Entry& e : entries_) {
    if (!e.t.defined() || !held_elsewhere(e.t)) continue;
    if (recycle_outputs) {
      if (e.t.use_count() != 1) e.t = detached(e.t);  // the caller has this TensorImpl; keep the memory
      e.handed_out = true;
      continue;
    }
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
  if (site.hint >= 0) unpoint(site.hint);
  site.hint = entry;
  if (entry >= 0) ++entries_[entry].pointing;
}

// One site fewer points at `entry`; with none left it is emptied and becomes vacant.
void ReusePool::unpoint(int32_t entry) {
  if (--entries_[entry].pointing == 0) {
    empty(entries_[entry]);
    vacant_.push_back(entry);
  }
}

void ReusePool::empty(Entry& e) {
  if (!e.t.defined()) return;
  bytes_ -= e.bytes;
  e.t.reset();
  e.bytes = 0;
  e.last = nullptr;
  e.data = nullptr;
  e.handed_out = false;
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
