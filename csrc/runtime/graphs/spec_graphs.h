// Graph mode (trident.compile(fn, graphs=True)): a specialization's run captured once as one CUDA
// graph, and later calls with the same arguments replayed with one graph launch after the native
// guards. A decode step of hundreds of small kernels then costs the host one launch, not hundreds.
//
// Contract:
//   - Key. A graph serves exactly the calls whose key equals the one it was captured with: device,
//     the caller's current stream, the module state set (its identity: a new set after any state
//     change), and per argument leaf its kind and, for tensors, dtype, sizes, strides, offset and the
//     data pointer's alignment up to kAlignBits bits (the caching allocator's granularity). Ints,
//     bools and floats (scalars) are in the key by value only where the spec's graphs are keyed by
//     them (scalars_keyed(): an ATen call takes a number computed from one, or a patch was refused).
//   - Scalars. Otherwise a replay whose scalars differ from those the graph's nodes hold first
//     re-runs the host program as a patch of the Triton launch nodes that depend on them
//     (scalar_patch.h): a decode step whose int position advances replays one graph. A refused
//     patch drops the graph and keys the spec's graphs by their scalars from then on, with the reason.
//   - Addresses. A graph's nodes hold its tensor arguments' addresses; a call with other addresses
//     (a new KV cache per generate(), a freed and reallocated argument) first rewrites the nodes
//     that hold them (graph_rebind.h: found by a second capture with the arguments moved, checked
//     word by word), so in-place writes land in the caller's tensors and stale addresses are never
//     replayed. A graph whose captures cannot prove where its addresses are is keyed by them
//     instead (a call with other addresses counts towards a capture of its own), and explain says
//     why; so are arguments whose extents overlap.
//   - Copied arguments. A tensor leaf the program does not write (the spec's `writes`), dense and at
//     most kCopyBytes, is keyed without its data pointer (a decode step's new token ids): the graph
//     was captured reading a buffer of its own. Where at most kPatchNodes nodes hold the buffer's
//     address (the rebind plan says which) and the caller's tensor is aligned as the buffer, a
//     replay points those nodes at the caller's tensor (only when its address changed: patches);
//     where the plan shows no node reading it, nothing; otherwise it first copies the caller's
//     tensor into the buffer.
//   - Why. Each capture beside a graph the spec holds notes the first difference between its key
//     and that graph's (recaptures(), explain), or new addresses where a graph is keyed by them.
//   - When. A key is captured at its kRepeats-th call among the spec's recent calls without a graph
//     (kRecentKeys keys counted; earlier calls have settled the sites' own plans: cuBLASLt's checked
//     algorithm, recorded launches; interleaved keys, two batch sizes, each count), only where
//     the run cannot record autograd history, no Python dispatch mode sees it, every tensor leaf is
//     on the current CUDA device and the caller's stream is not capturing. A spec keeps at most
//     kMaxGraphs graphs (the least recently replayed goes).
//   - Capture. The program runs under stream capture (thread-local mode) on a private stream, with
//     PyTorch's current stream set to it and the thread's allocations routed to a private pool
//     (private_pool.h): the graph's intermediates are memory no one else is given while it lives.
//     Module-kept buffers are not used (trd_frame::keeps_buffers off), and call sites record and
//     check nothing (in_graph_capture()). A run that fails under capture (a host synchronization,
//     an op that refuses capture) stops graphs for the spec, with its reason; the call then runs as
//     without graphs.
//   - Memory. A graph holds its private pool's segments while it lives (its intermediates, its
//     results' copies, what the rebind's moved captures took): eager frees those after each call.
//     A capture whose pool holds more than byte_limit() is not kept, and graphs stop for the spec,
//     with the reason: a program with that much intermediate memory (a long prefill) runs kernels
//     long enough that launching them one by one costs little.
//   - Results. A replay's results are fresh tensors (with reuse_outputs, ones the caller dropped:
//     Call::recycle), copies of the graph's own (the next replay overwrites those): a dense result
//     is copied by a copy node the capture appended to the graph, its destination pointed at the
//     fresh tensor before the launch where that tensor is not where the node copies already (no
//     copy issued by the host; the capture's own destinations, a second copy of each result in the
//     graph's pool, are held while the graph lives); any other by ATen after the launch. A result
//     only Triton launches touch (direct_results.h) is instead written by those launches straight
//     into the fresh tensor, their nodes pointed at it before the launch where it lies elsewhere
//     than they write: no copy node (unless TRIDENT_GRAPH_DIRECT_RESULTS=0). Integer results are
//     the capture run's, or the last scalar patch's, which computes them. A program whose results
//     share memory with an argument, module state or each other is not replayed (its results could
//     not be copied faithfully): graphs stop for the spec, with the reason.
//   - Segments (on unless TRIDENT_GRAPH_SEGMENTS=0). A program that
//     reads a device value on the host (`item`: a size, a tile count, a grid) cannot be one graph: its
//     host waits there. Its graph is split at each read into segments captured in one private pool.
//     The capture issues nothing: a read ends the segment being captured, and the program goes on
//     with the value the spec's previous plain run read there (note_read). A replay launches each
//     segment, reads the value on the host (the caller's stream, synchronized), and launches the
//     next only where the value is the one the capture assumed: the program's work is a function of
//     its key and the values read (the graph is keyed by its scalars, and by its arguments'
//     addresses: no rebind, no direct results), so the rest of the graph is what the program would
//     issue. Another value: the program is walked again up to that read (scalar_patch.h: each site's
//     recorded results, nothing issued) and runs as a plain run from there, over the graph's tensors,
//     so nothing before the read runs twice; a result over the graph's memory is copied out. The graph
//     is then dropped (the key captures again, assuming the new value); after kReadMisses such calls
//     graphs stop for the spec, with the read's line. An error after the first segment's launch
//     fails the call (work before it ran; running the program again would repeat it). A program that
//     also branches on data (`expect`) is not split: its graphs are off, as without the switch.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi/trident_abi.h"
#include "runtime/graphs/direct_results.h"
#include "runtime/memory/buffer_reuse.h"
#include "runtime/memory/private_pool.h"
#include "runtime/module/frame.h"

namespace trident::runtime {

class LoadedModule;

// True while this thread runs a program under a graph capture: call sites then issue work only
// (no recording, no checking, no synchronization), so the capture holds what a replay must do.
bool in_graph_capture();

// Graph-mode counters of one module (counters()).
struct GraphStats {
  int64_t graphs = 0, captures = 0, replays = 0, rebinds = 0, patches = 0;
  int64_t scalar_patches = 0, patched_nodes = 0;  // replays patched for new scalars; nodes they rewrote
  int64_t result_nodes = 0;  // nodes pointed at a replay's result tensor (direct results)
  int64_t segments = 0;      // host reads splitting the graphs held now (Segments)
  int64_t read_misses = 0;   // replays that read another value than their graph's and went on live
};

// Graph capture in segments (spec_graphs.h, Segments): the capture run's host read of `t`. Ends the
// segment being captured, records the read in the frame's patch and begins the next; *out is the value
// the capture assumes. False with *why: the capture fails (also where the capture is not in segments).
bool capture_host_read(trd_frame& f, const at::Tensor& t, bool as_float, int64_t* out, std::string* why);

// One spec's graphs. Used under the module's run lock (the bindings' run_spec).
class SpecGraphs {
 public:
  static constexpr int kRepeats = 3;
  static constexpr int kMaxGraphs = 4;
  static constexpr int64_t kCopyBytes = 1 << 16;
  static constexpr size_t kPatchNodes = 4;
  static constexpr size_t kRecaptureKinds = 8;
  static constexpr size_t kRecentKeys = 8;
  static constexpr int kAlignBits = 9;  // 512 bytes: every block of PyTorch's caching allocator
  static constexpr int64_t kDefaultByteLimit = int64_t{1} << 30;
  static constexpr int kReadMisses = 4;
  static constexpr size_t kMaxNotedReads = 4096;
  // The most memory one graph's private pool may hold (TRIDENT_GRAPH_BYTES, read once; default
  // kDefaultByteLimit): a larger graph is dropped and graphs stop for the spec (see Memory).
  static int64_t byte_limit();

  // What one call of the spec needs: its leaves and tensors, what the program writes, the state.
  struct Call {
    const trd_leaf* leaves = nullptr;
    int32_t nleaves = 0;
    const at::Tensor* const* args = nullptr;  // per leaf, nullptr for non-tensors (borrowed)
    const at::Tensor* state = nullptr;
    int32_t nstate = 0;
    std::shared_ptr<const void> state_id;     // identity of the state set; held by a graph
    // reuse_outputs=True: the module's pool (buffer_reuse.h), which hands a replay's results out
    // again once the caller has dropped them, as a run without graphs does; nullptr: fresh tensors.
    ReusePool* recycle = nullptr;
    const LoadedModule* mod = nullptr;  // the module and spec whose program a scalar patch re-runs
    int32_t spec = -1;
  };

  // writes: the spec's `writes`; graph_off: its `graph off` reason (nonempty: graphs never start);
  // result_kind: the reuse kind (buffer_reuse.h) of its results' sites under Call::recycle;
  // scalars_keyed: why its graphs are keyed by its scalars (ScalarPatch::keyed_by), or "";
  // direct: the results its graphs may write straight into a replay's tensors (direct_results.h),
  // used where direct_results_on(); host_read: its `graph reads` line (nonempty: graphs in segments,
  // or none where segments_on() is false or `branches` says the program also branches on data).
  SpecGraphs(std::vector<int32_t> writes, std::string graph_off, int32_t result_kind, std::string scalars_keyed,
             std::vector<DirectResult> direct = {}, const std::string& host_read = {}, bool branches = false);
  // On unless TRIDENT_GRAPH_SEGMENTS=0, read as each specialization loads.
  static bool segments_on();
  // On unless TRIDENT_GRAPH_DIRECT_RESULTS=0, read as each specialization loads.
  static bool direct_results_on();
  ~SpecGraphs();
  SpecGraphs(const SpecGraphs&) = delete;
  SpecGraphs& operator=(const SpecGraphs&) = delete;

  using Key = c10::SmallVector<int64_t, 96>;
  // A call's key (see Key above), computed once per call.
  struct Keyed {
    Key key;
    c10::SmallVector<bool, 32> copied;  // per leaf: copied into the graph's buffer, not keyed by address
    c10::SmallVector<int32_t, 32> bound;  // the tensor leaves whose addresses the graph's nodes hold
    c10::SmallVector<uint64_t, 32> ptrs;  // their data pointers
    c10::SmallVector<int64_t, 8> scalars;  // the scalar leaves' values (floats' bits), in leaf order
    int device = -1;
    void* stream = nullptr;             // the caller's current stream
  };
  // The call's key; false: the call may not use graphs (see When).
  bool key_of(const Call& c, Keyed& k) const;
  // Replays a graph of this key: the results into f.slots (fresh tensors) and out_ints. False: no
  // graph for it (the caller runs the program, or captures it), or, with f.error set, a replay in
  // segments failed after issuing work: the call fails with that error (capture() likewise).
  bool replay(const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints);
  // A plain run's host read (rt_table.cpp): the values a capture in segments assumes.
  void note_read(int64_t value) {
    if (!segmented_at_.empty() && !stopped_ && noted_.size() < kMaxNotedReads) noted_.push_back(value);
  }
  // Whether this call, which found no graph, is the one to capture (see When).
  bool should_capture(const Keyed& k);
  // Captures the program of `spec` for this call, then replays it for the call's results (in
  // f.slots and out_ints, as replay()). False: nothing captured (graphs may have stopped for the
  // spec, why() says); f is as before the attempt and the caller runs the program.
  bool capture(const LoadedModule& mod, int32_t spec, const Call& c, const Keyed& k, trd_frame& f,
               int64_t* out_ints, int32_t nout_ints);

  bool stopped() const { return stopped_; }
  const std::string& why() const { return why_; }
  // Why the spec's last graph is keyed by its arguments' addresses (not rebound); empty otherwise.
  const std::string& keyed_by_address() const { return bind_why_; }
  // Where the spec's graphs are split (its first host read, Segments); empty otherwise.
  const std::string& segmented_at() const { return segmented_at_; }
  // Why the spec's graphs are keyed by its scalars' values (see Scalars); empty otherwise.
  const std::string& scalars_keyed() const { return scalars_keyed_; }
  // Why calls captured graphs of their own beside one the spec had: per kind of difference (the
  // first between the keys, graph_keys.h: "leaf 2 (int)", "the caller's stream", ...), how many
  // captures and the last one's words ("leaf 2 (int): 17 -> 18").
  struct Recapture {
    std::string what, last;
    int64_t count = 0;
  };
  const std::vector<Recapture>& recaptures() const { return recaptures_; }
  GraphStats stats() const;

 private:
  struct Graph;
  // How a launch ended, besides its error: a patch that did not complete (patch_why, and refused:
  // whether a patch cannot serve the spec; nothing launched, the graph half written); a replay in
  // segments that went on live at a read (live); one that failed after issuing work (failed, with
  // the frame's error).
  struct Outcome {
    std::string patch_why;
    bool refused = false, live = false, failed = false;
  };
  // Copies the copied arguments in, patches the graph for the call's scalars where they differ (or
  // after a rebind, `rebound`, of a graph patched before), launches, copies the results out; the
  // error, or empty. A patch that did not complete: *patch_why says why, *refused whether a patch
  // cannot serve the spec; nothing was launched and the graph is half written.
  std::string launch(Graph& g, const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints, bool rebound,
                     Outcome* o);
  // A graph in segments: launches each segment but the last, reading the value after it (Segments).
  // Where a value differs, runs the rest live (live_from) and says so in *o.
  std::string launch_segments(Graph& g, const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints, Outcome* o);
  void live_from(Graph& g, const Call& c, trd_frame& f, int64_t* out_ints, size_t read, int64_t value, Outcome* o);
  // The arguments as a patch or walk of g sees them: a copied one in g's buffer unless its nodes were
  // pointed at the caller's tensor (`want`, launch's; null: the buffer).
  c10::SmallVector<const at::Tensor*, 32> patch_args(const Graph& g, const Call& c,
                                                     const c10::SmallVector<uint64_t, 32>* want) const;
  // Re-runs the spec's program as a patch of g's nodes (scalar_patch.h) with the arguments where the
  // nodes hold them (`want`, launch's); "" when done.
  std::string patch(Graph& g, const Call& c, const Keyed& k, const c10::SmallVector<uint64_t, 32>& want, trd_frame& f,
                    bool* refused);
  // A launch of the front graph by replay(); false: the caller runs the program.
  bool replay_front(const Call& c, const Keyed& k, trd_frame& f, int64_t* out_ints, bool rebound);
  void key_scalars(const std::string& why);
  bool launched(const std::string& error);  // true on success; else stops graphs with the error
  void stop(const std::string& why);

  // A replay's result for frame slot `slot`, shaped as `like`: under c.recycle one the caller dropped
  // (or fresh, kept for later), else fresh.
  at::Tensor result(const Call& c, int32_t slot, const at::Tensor& like);

  std::vector<int32_t> writes_;
  int32_t result_kind_;
  std::string segmented_at_;  // nonempty: graphs in segments (Segments), split first at this read
  std::vector<int64_t> noted_, assumed_;  // the reads of the current or last plain run; of the one before
  std::string read_miss_;  // the last read miss's words, for the next capture's note (recaptures())
  std::vector<DirectResult> direct_;  // empty unless direct_results_on()
  // Per result slot, its allocation site in the module's pool (Call::recycle). Node-based: the pool
  // holds pointers to sites, so they never move; they live as long as the spec, beyond any graph.
  std::unordered_map<int32_t, ReusePool::Site> result_sites_;
  std::list<std::unique_ptr<Graph>> graphs_;  // most recently replayed first
  std::list<std::pair<Key, int>> recent_;  // keys of recent calls without a graph, with their counts
  bool stopped_ = false;
  std::string why_, bind_why_, scalars_keyed_;
  int64_t captures_ = 0, replays_ = 0, rebinds_ = 0, patches_ = 0, scalar_patches_ = 0, patched_nodes_ = 0;
  int64_t result_nodes_ = 0, read_misses_ = 0;
  std::vector<Recapture> recaptures_;  // at most kRecaptureKinds kinds
};

}  // namespace trident::runtime
