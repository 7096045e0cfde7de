// Scalar patches: one CUDA graph of a specialization (spec_graphs.h) serving calls whose Python ints,
// bools and floats (its scalar leaves) differ from the ones it was captured with: a decode step
// whose int position advances every call replays one graph, rewritten for each position.
//
// Contract:
//   - What may differ. What a program computes from a scalar leaf goes to Triton launches (integer
//     and float parameters, grids, the byte offsets of pointers into tensors: ptr(%cache, 128 * $0)),
//     to checks and to the integer results: all of it is computed by the host program itself. An ATen
//     call that takes such a number (a slice starting at the position, an allocation sized by it)
//     issues work only ATen knows how to redo; so does a kernel with scratch memory, tensor
//     descriptors, clusters, cooperative or PDL launches. A spec with either keys its graphs by its
//     scalars' values, as graphs did before patches (keyed_by: from the IR, at load), and every patch
//     checks the same again while it runs (the IR analysis is not trusted alone).
//   - Record. The capture run records each site it runs, in order: an ATen call's dyn values and
//     results (non-owning tensors over the graph's own memory, whose pool the graph holds; a result
//     over an argument's memory is kept as that argument plus an offset), and a Triton launch's
//     graph node (the capture's last node after the launch: cuStreamGetCaptureInfo), grid and
//     parameter slots.
//   - Patch. A call whose scalars differ from those the graph's nodes hold re-runs the host program
//     in patch mode (trd_frame::patch): an ATen call issues nothing and gives its recorded results
//     once its dyn values are proven the recorded ones; a Triton launch computes its grid and
//     parameters as for a launch and rewrites its node (cuGraphExecKernelNodeSetParams, which
//     leaves launches already queued as they were) only where they differ from what the node holds.
//     Anything else refuses: ATen dyn values that differ, another order of sites, a launch the
//     capture skipped (an empty grid) or one whose grid is now empty, a host read (item). A refused
//     or failed patch leaves the graph half written: the caller drops it.
//   - Arguments. The patch run sees the arguments where the graph's nodes hold them (after any
//     rebind), so the addresses it computes are the ones a rebind wrote. A rebind rewrites nodes from
//     the capture's words, undoing earlier patches of their scalars: after one, a graph patched
//     before is patched again (spec_graphs.cpp); the nodes the rebind rewrote then differ from the
//     recorded words in an address, so the patch finds them.
//   - Direct results (direct_results.h). The same record serves a graph whose result is written by
//     its launches straight into the tensor each replay returns: point_results() rewrites those
//     launches' nodes (their slots for that result) where the tensor lies elsewhere than they write,
//     and in a patch run the result's allocation site gives a tensor where the replay's is, so the
//     launches the patch computes write there too. Such a graph has a record even without scalars:
//     a rebind undoes these rewrites as it undoes a patch, and the patch run after it redoes them.
//   - Host reads (a graph in segments, spec_graphs.h). The capture run records each read (`item`)
//     as the end of a segment: the tensor read, over where the graph has it, and the value the
//     capture assumed. A replay that reads another value there walks the program again (walk mode):
//     every site before that read takes its recorded turn as in a patch, but nothing may differ
//     (a graph in segments is keyed by its scalars, so nothing does: a difference refuses, it is
//     never rewritten), earlier reads give their recorded values, and that read gives the value read
//     and clears the frame's patch, so that the rest of the run issues its work as a plain run does.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "runtime/graphs/direct_results.h"
#include "runtime/module/frame.h"

// The driver's handles as cuda.h declares them (cuda.h is the runtime's own include; the bindings
// include this header for keyed_by).
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;
typedef struct CUstream_st* CUstream;

namespace trident::runtime {

struct AtenSite;
struct LaunchSite;
class KernelInfo;

// What a patch cannot rewrite in a node of kernel `k`, or "": tensor descriptors, clusters,
// cooperative or programmatic dependent launches; and, where the grid changes (`grid_changes`),
// scratch memory, which is sized by the grid (the capture's serves a node whose grid stays).
std::string unpatchable(const ir::Kernel& k, bool grid_changes);

class ScalarPatch {
 public:
  // Why spec `s`'s graphs must be keyed by its scalar leaves' values: the first ATen call, or
  // kernel a patch cannot rewrite, that takes a number computed from one; "" when none does.
  static std::string keyed_by(const ir::Spec& s);

  // Records from its making until finish(), then patches.
  bool patching() const { return exec_ != nullptr; }

  // Record mode (the capture run), after the site ran: `f` holds its results; a launch's kernel
  // (launched on the current device, as every tensor of a graph's call is), parameter slots (scratch
  // pointers included) and `stream`, where it was captured (null: launched nothing).
  void record_call(int32_t site, const AtenSite& s, const trd_frame& f, const int64_t* dyn);
  void record_launch(int32_t site, const KernelInfo& k, const c10::SmallVector<uint64_t, 16>& slots,
                     const uint32_t* grid, CUstream stream);
  // Capture ended: patches may now run against `exec`. `direct`: the results the graph writes
  // straight into a replay's tensors (direct_results.h), with the graph's own tensor of each
  // (`captured`, where the capture's launches wrote it); a result whose launches are not in the
  // record, or that is not dense, is left out (direct_slot() says which are in).
  void finish(CUgraphExec exec, const std::vector<DirectResult>& direct = {},
              const std::vector<std::pair<int32_t, at::Tensor>>& captured = {});

  // Patch mode. begin before the run; each site then takes its turn instead of running; false
  // refuses the patch with refusal() set.
  void begin();
  bool patch_call(int32_t site, const AtenSite& s, trd_frame& f, const int64_t* dyn);
  bool patch_launch(int32_t site, const LaunchSite& s, const KernelInfo& k, trd_frame& f, const uint32_t* grid,
                    const int64_t* dyn);
  bool refuse(const std::string& why);
  // After the run: true when every recorded site took its turn and nothing was refused.
  bool complete() const { return refusal_.empty() && at_ == events_.size(); }
  const std::string& refusal() const { return refusal_; }
  int64_t nodes_set() const { return nodes_set_; }  // by the last patch

  // Host reads. Record mode, at a read: `t` over where the graph's nodes have the tensor read,
  // whether the program takes it as a float, and the value the capture assumed (int64_t, or a
  // double's bits); the launches recorded after it belong to the next segment.
  struct Read {
    at::Tensor t;
    bool as_float = false;
    int64_t value = 0;
  };
  void record_read(const at::Tensor& t, bool as_float, int64_t value);
  const std::vector<Read>& reads() const { return reads_; }
  // Walk mode: begin_walk(at, value) before the run; each read then takes walk_read: the recorded
  // value before read `at`, `value` at it, after which the frame's patch is cleared (a plain run
  // from there: walked_live()). holds(t): t's memory is a recorded result's (the graph's own), which
  // the next replay overwrites.
  void begin_walk(size_t at, int64_t value);
  bool walking() const { return walk_at_ != kNoWalk; }
  bool walk_read(trd_frame& f, int64_t* out);
  bool walked_live() const { return walked_live_; }
  bool holds(const at::Tensor& t) const;

  // Direct results, in finish()'s order: their slots. want(i, address) says where a replay's tensor
  // for the i-th is; a patch run then computes the launches' pointers at it (its allocation site
  // gives a tensor there), and point_results() rewrites the nodes that still write elsewhere: the
  // number of nodes, or -1 with the driver's refusal in *why (the graph is then half written).
  const std::vector<int32_t>& direct_slots() const { return direct_slots_; }
  void want(size_t i, uint64_t address) { direct_[i].want = address; }
  int64_t point_results(std::string* why);

 private:
  struct Result {
    at::Tensor t;            // non-owning, at the address the graph's nodes hold
    int32_t leaf = -1;       // >= 0: over argument leaf `leaf`'s memory, `delta` bytes from its data
    uint64_t delta = 0;
    int32_t direct = -1;     // >= 0: direct result direct_[direct]: given at its `want` in a patch
  };
  struct Event {
    int32_t site = -1;    // -1: a host read, reads_[read]
    bool launch = false;
    int32_t read = -1;
    c10::SmallVector<int64_t, 8> dyn;                // ATen: the dyn values it took
    std::vector<Result> results;                     // ATen: per result slot
    CUgraphNode node = nullptr;                      // launch: its node (null: launched nothing)
    const KernelInfo* kernel = nullptr;              // launch: its kernel (the spec's, which outlives the graph)
    int device = -1;
    uint32_t grid[3] = {0, 0, 0};                    // launch: what the node holds now
    c10::SmallVector<uint64_t, 16> slots;            // launch: its parameter slots now
  };
  struct Direct {
    uint64_t want = 0;  // where the replay's tensor is
    struct Use {
      size_t event;
      uint32_t param;
      uint64_t delta;  // the pointer minus the tensor's address
    };
    c10::SmallVector<Use, 4> uses;
  };
  Event* next(int32_t site, bool launch);
  // Rewrites e's node to launch its kernel over `grid` with parameter slots `slots` (scratch last);
  // false with the refusal set.
  bool set_node(Event& e, const uint32_t* grid, const c10::SmallVector<uint64_t, 16>& slots);

  static constexpr size_t kNoWalk = SIZE_MAX;
  CUgraphExec exec_ = nullptr;  // set by finish()
  std::vector<Event> events_;
  std::vector<Read> reads_;
  size_t walk_at_ = kNoWalk;
  int64_t walk_value_ = 0;
  bool walked_live_ = false;
  size_t at_ = 0;
  std::string refusal_;
  int64_t nodes_set_ = 0;
  std::vector<Direct> direct_;
  std::vector<int32_t> direct_slots_;
};

}  // namespace trident::runtime
