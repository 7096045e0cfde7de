#include "runtime/memory/buffer_reuse.h"

#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>

#include "runtime/module/env_switch.h"

namespace trident::runtime {
namespace {

ReusePool::ObjectCheck g_object_check = nullptr;

// A new TensorImpl over t's storage with t's metadata, no autograd history and no Python object.
at::Tensor detached(const at::Tensor& t) {
  return at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(c10::VariableVersion(0),
                                                                     /*allow_tensor_metadata_change=*/true));
}

}  // namespace

void ReusePool::set_object_check(ObjectCheck check) { g_object_check = check; }

int64_t ReusePool::budget() {
  static const int64_t bytes = env_bytes("TRIDENT_KEPT_BYTES", kDefaultBudget);
  return bytes;
}

std::optional<c10::Stream> current_stream(c10::Device device) {
  if (device.is_cpu()) return std::nullopt;
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}

ReusePool::Serve ReusePool::serves(const Entry& e, int32_t kind, const Key& key) const {
  // An inference tensor (made under torch.inference_mode) cannot be written outside it, and a run
  // under it makes inference tensors: a buffer serves runs of the mode it was made in.
  if (!e.t.defined() || e.kind != kind || e.key != key || current_stream(e.t.device()) != e.stream ||
      e.t.is_inference() != c10::InferenceMode::is_enabled())
    return Serve::kNo;
  return availability(e);
}

// Whether e's tensor may serve a request now, and how: a result the caller has dropped serves only
// as the call made it (as_kept), and only once no one but the pool may see it be written (ownership).
ReusePool::Serve ReusePool::availability(const Entry& e) const {
  if (e.handed_out && !as_kept(e)) return Serve::kNo;  // check_escapes drops it once the caller lets go
  return ownership(e);
}

// kNo while anything but the pool may see e's tensor be written. A result the caller has dropped is
// held by the pool and by its own Python object, which only that TensorImpl holds (PyObject
// preservation), also while a later call uses it inside (its handed_out flag is cleared then);
// set_object_check's function judges the object, and one the caller changed serves as kNewImpl.
ReusePool::Serve ReusePool::ownership(const Entry& e) const {
  if (e.t.storage().use_count() != 1) return Serve::kNo;
  const auto holders = e.t.use_count();
  if (holders == 1) return Serve::kAsIs;  // no Python object: never returned, or only views were
  if (holders != 2 || g_object_check == nullptr) return Serve::kNo;
  const c10::TensorImpl& impl = *e.t.unsafeGetTensorImpl();
  switch (g_object_check(impl)) {
    case ResultObject::kAsMade: return impl.autograd_meta() == nullptr ? Serve::kAsIs : Serve::kNewImpl;
    case ResultObject::kChanged: return Serve::kNewImpl;
    default: return Serve::kNo;  // the caller has the object, or a second C++ holder has the tensor
  }
}

// Whether e's tensor is still as keep() made it, in everything a caller holding it could change:
// resize_ and set_ move the storage or its size (untyped_storage().resize_(0) frees it), t_(),
// as_strided_() and squeeze_() change the layout, _set_conj, _set_neg and names the dispatch keys.
bool ReusePool::as_kept(const Entry& e) const {
  const at::Tensor& t = e.t;
  if (t.storage().nbytes() != static_cast<size_t>(e.bytes) || t.storage().data() != e.data ||
      t.key_set() != e.keys || t.dtype() != e.dtype)
    return false;
  const int64_t dim = t.dim();
  if (e.layout.size() != static_cast<size_t>(2 * dim + 1) || t.storage_offset() != e.layout[2 * dim]) return false;
  for (int64_t d = 0; d < dim; ++d)
    if (t.sizes()[d] != e.layout[d] || t.strides()[d] != e.layout[dim + d]) return false;
  return true;
}

void ReusePool::snapshot(Entry& e) {
  const at::Tensor& t = e.t;
  e.data = t.storage().data();
  e.layout.assign(t.sizes().begin(), t.sizes().end());
  e.layout.append(t.strides().begin(), t.strides().end());
  e.layout.push_back(t.storage_offset());
  e.keys = t.key_set();
  e.dtype = t.dtype();
}

void ReusePool::detach(Entry& e) {
  e.t = detached(e.t);
  snapshot(e);
}

at::Tensor* ReusePool::take(Site& site, const Key& key) {
  if (site.escaped) return nullptr;
  Serve how = Serve::kNo;
  int32_t found = -1;
  if (site.hint >= 0 && (how = serves(entries_[site.hint], site.kind, key)) != Serve::kNo) found = site.hint;
  if (found < 0 && site.spare >= 0 && (how = serves(entries_[site.spare], site.kind, key)) != Serve::kNo) {
    std::swap(site.hint, site.spare);  // the result over the old hint is still alive: it waits as spare
    found = site.hint;
  }
  for (int32_t i = 0; found < 0 && i < static_cast<int32_t>(entries_.size()); ++i)
    if ((how = serves(entries_[i], site.kind, key)) != Serve::kNo) found = i;
  if (found < 0) return nullptr;
  point(site, found);
  Entry& e = entries_[found];
  if (how == Serve::kNewImpl) {  // the caller changed the object: its memory goes out under a new one
    retired_.push_back(e.t);
    detach(e);
  }
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
                   (!entries_[i].t.defined() || ownership(entries_[i]) != Serve::kNo);
  if (own) {
    if (entries_[i].t.defined()) retired_.push_back(entries_[i].t);  // its Python object goes after the run
    empty(entries_[i]);
  }
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
  e.handed_out = false;
  snapshot(e);
  bytes_ += bytes;
}

void ReusePool::check_escapes(bool recycle_outputs) {
  retired_.clear();
  for (Entry& e : entries_) {
    if (!e.t.defined()) continue;
    if (e.handed_out) {  // out with an earlier result: dropped once the caller lets go of it reshaped
      if (!as_kept(e) && ownership(e) != Serve::kNo) empty(e);
      continue;
    }
    if (ownership(e) != Serve::kNo) continue;
    if (recycle_outputs) {
      // A result with autograd history would keep its graph alive in the pool: keep the memory only.
      if (e.t.use_count() != 1 && e.t.unsafeGetTensorImpl()->autograd_meta() != nullptr) detach(e);
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
