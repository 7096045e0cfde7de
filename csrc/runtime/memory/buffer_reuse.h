// Buffers a module keeps from one call to the next, shared by its allocation sites.
//
// Most tensors a decode step allocates are intermediates: torch.empty before a Triton kernel whose
// output only the next op reads, or the result of an out= op. The module keeps such a tensor in a
// pool after the call and, on a later request, hands it out again instead of going through the
// caching allocator. Any allocation site may take any kept tensor, also one another site used
// earlier in the same call: layer 1's intermediates take the buffers layer 0's have released, so the
// pool holds about what eager has live at once, not one buffer per site. A kept tensor serves a
// request when all of these hold:
//   - the request is the same: the same kind of site (operator and constant operands, so the
//     dtype, layout and device a site takes from its constants agree) and the same key (sizes, or
//     the template tensor's or inputs' sizes and strides: what else the result's metadata depends on);
//   - nothing but the pool holds the tensor or its storage (TensorImpl and StorageImpl use counts
//     are 1), so no live value, output, view or earlier frame can observe the rewrite;
//   - the current stream is the one of its last use, so stream order makes the reuse safe exactly
//     as the caching allocator's reuse of a freed block on the same stream is;
//   - it was made in the inference mode the run is in (an inference tensor cannot be written
//     outside torch.inference_mode, and a run under it makes inference tensors);
//   - the site asking has never handed out a buffer that escaped: after every run the pool drops,
//     for good, any tensor still held once the frame is gone (it was returned, or a returned view
//     aliases it), and the site that handed it out last allocates normally from then on, so
//     outputs are never recycled; unless the function was compiled with reuse_outputs=True (see
//     below);
//   - no Python dispatch mode (TorchDispatchMode) sees the run: a mode's Python code may keep any
//     tensor the run makes (AOTAutograd runs a backend graph's first call under one that analyses
//     custom ops), which would mark every allocation site escaped for good; such a run takes and
//     keeps nothing (trd_frame::keeps_buffers);
//   - the tensor is at most kMaxBytes, and the pool stays within budget() bytes: TRIDENT_KEPT_BYTES,
//     read once (default kDefaultBudget; python/trident/config.py validates it at import). With 0
//     the pool keeps nothing and every allocation site allocates on every call, as eager does.
// With reuse_outputs=True (trident.compile's option, off by default), a buffer that went out with
// the call's result is not dropped: the pool keeps the returned TensorImpl, and hands it out again
// once the caller has dropped every tensor over its storage, on the stream of its last use. With
// PyTorch's PyObject preservation the dropped Python object lives on, held by the TensorImpl the pool
// holds, and the next call returns that same object: no TensorImpl, no Python object and no memory
// is allocated or freed, where the caching allocator would have done all three. A kept result
// serves only as the call made it: its sizes, strides, offset, dtype, dispatch keys (conj, neg,
// names) and storage (bytes, address) unchanged, else it is dropped after the run; and if the caller
// gave its object attributes, weak references, another class or autograd state (requires_grad_,
// grad), the memory serves under a new TensorImpl with no Python object (the old object is released
// after the run), so nothing the caller did to a result carries over to a later one. Which objects
// are as made is decided by the extension (set_object_check: python/bindings/result_objects.cpp),
// as the runtime does not link Python. A result with autograd history keeps only its memory, under a
// new TensorImpl, from the start. A site keeps the memory of its last two results (hint and spare),
// so `out = fn(x)` in a loop, where the previous result is alive while the next call runs,
// alternates between two buffers as eager's allocations would. The contract the caller accepts: the
// caching allocator's record_stream does not reach this memory (it is never freed to the allocator
// while kept), so a returned tensor used on another stream must be kept alive, not dropped, until
// that stream's work on it is done; and a result's version counter (`_version`) continues from the
// object's last use.
// Each site remembers the entry it took last (its hint) and tries it first, so a call that repeats
// the last one finds every buffer at its hint; a site scans the pool only when its hint fails. An
// entry no site points at any more is dropped. Runs of one module are serialized by the GIL (the
// hot path never releases it); a reentrant run sees the outer run's references (use count 2) and
// allocates normally.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace trident::runtime {

// The Python object of a tensor the pool holds, as the extension sees it (ReusePool::ObjectCheck).
enum class ResultObject {
  kNone,     // the TensorImpl has no Python object
  kHeld,     // someone besides the TensorImpl holds the object
  kAsMade,   // only the TensorImpl holds it, and it is as the call returned it
  kChanged,  // only the TensorImpl holds it, but the caller changed it (attributes, weakrefs, class)
};

class ReusePool {
 public:
  static constexpr int64_t kMaxBytes = int64_t{16} << 20;
  static constexpr int64_t kDefaultBudget = int64_t{256} << 20;
  static int64_t budget();
  // Set once by the extension at import, before any run; without it a returned TensorImpl that kept
  // its Python object never serves again (its memory still does, when the object has gone).
  using ObjectCheck = ResultObject (*)(const c10::TensorImpl& impl);
  static void set_object_check(ObjectCheck check);
  using Key = c10::SmallVector<int64_t, 16>;

  // One allocation site's state in the pool.
  struct Site {
    int32_t kind = -1;     // sites of one kind make the same result from the same key (set at load)
    int32_t hint = -1;     // the entry it took or filled last
    int32_t spare = -1;    // recycle_outputs: the entry of its result before last, tried after hint
    bool escaped = false;  // a buffer it handed out was still held after a run: it never reuses again
  };

  // A kept tensor that may serve this request now (the site's hint first), or nullptr.
  at::Tensor* take(Site& site, const Key& key);
  // Keep a fresh allocation the site made after take() found nothing: in the site's own entry when
  // no other site points at it and it is not in use, else in a new entry, budget permitting.
  void keep(Site& site, const at::Tensor& t, Key key);
  // After a run whose frame is gone: drop every tensor still held elsewhere, marking its site; or,
  // with recycle_outputs, keep it to serve once the caller lets go of it (and drop kept results the
  // caller has reshaped). Releases what the run replaced (retired_) first.
  void check_escapes(bool recycle_outputs);

  int64_t buffers() const;  // tensors kept now
  int64_t bytes() const { return bytes_; }
  int64_t recycled() const { return recycled_; }  // requests served by memory a returned tensor had

 private:
  struct Entry {
    at::Tensor t;                       // undefined: empty (dropped, or not yet filled)
    int32_t kind = -1;
    Key key;
    std::optional<c10::Stream> stream;  // of its last use
    int64_t bytes = 0;
    int32_t pointing = 0;               // sites whose hint is this entry
    Site* last = nullptr;               // the site that handed it out last
    bool handed_out = false;            // its storage went out with a call's result (recycle_outputs)
    // The tensor when kept (checked once handed out): its storage's address; sizes, strides, offset.
    const void* data = nullptr;
    c10::SmallVector<int64_t, 13> layout;
    c10::DispatchKeySet keys;
    caffe2::TypeMeta dtype;
  };
  enum class Serve { kNo, kAsIs, kNewImpl };  // kNewImpl: its memory, under a new TensorImpl
  Serve serves(const Entry& e, int32_t kind, const Key& key) const;
  Serve availability(const Entry& e) const;
  Serve ownership(const Entry& e) const;
  bool as_kept(const Entry& e) const;
  void snapshot(Entry& e);  // records what as_kept compares
  void detach(Entry& e);    // e's memory under a new TensorImpl with no Python object
  void point(Site& site, int32_t entry);
  void unpoint(int32_t entry);
  void empty(Entry& e);
  int32_t new_entry();

  std::vector<Entry> entries_;
  std::vector<int32_t> vacant_;  // entries no site points at, for new_entry()
  // TensorImpls a run replaced, with their Python objects: released after the run, not inside it.
  std::vector<at::Tensor> retired_;
  int64_t bytes_ = 0;
  int64_t recycled_ = 0;
};

// The stream ATen work on `device` is queued on now; nullopt for devices without streams (CPU).
std::optional<c10::Stream> current_stream(c10::Device device);

}  // namespace trident::runtime
