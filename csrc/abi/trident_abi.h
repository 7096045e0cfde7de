/* trident_abi.h: the one contract between a generated Specialization Cache Module and the runtime.
 *
 * A module is made of objects compiled by the system compiler from plain C11: one per
 * specialization (its host program, trd_spec) and one selector (the decision program over all of
 * them, trd_selector). Adding a specialization compiles its own object and a new selector; the
 * others' objects, and the runtime state of their call sites, are reused. Generated code includes no
 * torch header: everything it needs from the runtime goes through the versioned function table
 * trd_rt. Bump TRD_ABI_VERSION on any change to a struct below; the loader refuses objects built for
 * another version, and the version is part of each object's content hash, so stale cache entries
 * are never loaded.
 *
 * Ownership: the runtime owns every tensor. Generated code names tensors by frame slot index and
 * never touches them; it only computes integers (guards, symbolic sizes, grids) and sequences calls.
 */
#ifndef TRIDENT_ABI_H
#define TRIDENT_ABI_H

#include <stdint.h>

#define TRD_ABI_VERSION 4
#define TRD_MAX_DIM 8
#define TRD_BRANCH_MISS "trident: branch not taken: "

/* Leaf kinds: one flattened argument (user argument or captured module state). */
enum { TRD_NONE = 0, TRD_TENSOR = 1, TRD_INT = 2, TRD_FLOAT = 3, TRD_BOOL = 4 };

/* trd_leaf.flags bits */
enum { TRD_REQUIRES_GRAD = 1 };

/* One argument as the guards see it. Filled by the bindings from the TensorImpl (tensors) or the
 * Python object (scalars). sizes/strides beyond dim are zero, so any guard may read any index
 * below TRD_MAX_DIM without first proving the rank: a read is always memory-safe, and a guard that
 * reads a dimension the tensor lacks simply fails alongside the rank guard. */
typedef struct trd_leaf {
  int32_t kind;
  int32_t dtype;        /* c10::ScalarType */
  int32_t device_type;  /* c10::DeviceType */
  int32_t device_index;
  int32_t dim;
  int32_t flags;
  uint64_t keyset;      /* dispatch key set, masked as the bindings define */
  int64_t sizes[TRD_MAX_DIM];
  int64_t strides[TRD_MAX_DIM];
  int64_t storage_offset;
  uint64_t data_ptr;
  int64_t ival;         /* ints and bools */
  double fval;          /* floats */
} trd_leaf;

/* One call: the flattened user arguments and the global state the guards read. Captured module
 * state (parameters, buffers) is not here: the bindings check it before selection, once for all
 * specializations, and the runtime hands the tensors to call sites directly. */
typedef struct trd_call {
  const trd_leaf* leaves;
  int32_t nleaves;
  int32_t grad_mode;          /* torch.is_grad_enabled() */
  const char* structure;      /* argument structure string, see python/bindings/flatten.h */
  int32_t structure_len;
  int32_t after;              /* select answers only specializations numbered above this (-1: all):
                               * the next one to try after a run found its branch not taken */
  const int64_t* const* tables; /* the module's guard tables (trd_selector.ntables of them), set by
                               * the runtime at selection: data the selector reads that differs
                               * from process to process (module state addresses), so the
                               * selector's code does not */
} trd_call;

typedef struct trd_frame trd_frame; /* opaque: per-call tensor slots, owned by the runtime */

/* The runtime's function table, handed to generated code on every run.
 * Every function returns 0 on success, nonzero after recording an error in the frame;
 * generated code then returns nonzero at once and the runtime raises. */
typedef struct trd_rt {
  uint32_t abi_version;
  uint32_t size;  /* sizeof(trd_rt), for forward-compatible growth */
  /* Run call site `site` of the module; dyn holds the site's runtime integers in site order. */
  int (*call)(trd_frame* f, int32_t site, const int64_t* dyn);
  /* Launch Triton kernel site `site`: grid and the integer/float params computed by generated code. */
  int (*launch)(trd_frame* f, int32_t site, const uint32_t* grid, const int64_t* ints, const double* floats);
  /* Drop the frame's reference to a slot (last use passed). */
  void (*release)(trd_frame* f, int32_t slot);
  /* Record a failure raised by generated code itself (e.g. a symbolic size went negative). A message
   * "ZeroDivisionError: ...", "ValueError: ..." or "OverflowError: ..." raises that Python exception
   * with the rest of the message (Python float semantics); TRD_BRANCH_MISS "..." says the call's
   * data took another branch than the one the program was traced for (`expect`): not an error, the
   * caller runs another specialization; any other raises RuntimeError. */
  int (*fail)(trd_frame* f, const char* message);
  /* Tensors the program reads by location: kind 0 an argument leaf, 1 module state, 2 a frame slot. */
  /* The number in the one-element tensor at (kind, index): an int64 in *out, or with as_float the
   * bits of a double. Reading a CUDA tensor's number waits for the device, as Tensor.item() does. */
  int (*item)(trd_frame* f, int32_t kind, int32_t index, int32_t as_float, int64_t* out);
  /* Size (stride when which == 1) of dimension d of the tensor at (kind, index), in *out. */
  int (*dim)(trd_frame* f, int32_t kind, int32_t index, int32_t which, int32_t d, int64_t* out);
} trd_rt;

/* One specialization's host program. Reads leaves, writes integer outputs to out_ints. */
typedef int (*trd_run_fn)(const trd_rt* rt, trd_frame* f, const trd_leaf* leaves, int64_t* out_ints);

/* What a specialization's object exports through trident_spec_v1(). The object holds code only:
 * the tables that describe its call sites, kernels and output tree (host IR text, holding this
 * process's object numbers and file paths) come to the runtime from the emitter with the object,
 * so the same program is the same object (and the same cache entry) in any module and any process.
 * The counts let the loader check that the two belong together. */
typedef struct trd_spec {
  uint32_t abi_version;
  trd_run_fn run;
  int32_t nslots;                    /* frame size of the program */
  int32_t nout_ints;
  int32_t nsites;                    /* call and launch sites the program names, 0..nsites-1 */
  int32_t nkernels;                  /* Triton kernels its launch sites name */
} trd_spec;

/* What the selector's object exports through trident_selector_v1(). */
typedef struct trd_selector {
  uint32_t abi_version;
  int32_t nspecs;                    /* 1 + the highest spec id its code names; ids in its pick
                                        tables are data (at most the module's count) */
  int32_t ntables;                   /* guard tables it reads through trd_call.tables */
  /* Decision program: index of the specialization whose guards all hold, or -1 (miss).
   * Never explains; the runtime's cold path does that. */
  int32_t (*select)(const trd_call* call);
} trd_selector;

typedef const trd_spec* (*trd_spec_entry_fn)(void);
typedef const trd_selector* (*trd_selector_entry_fn)(void);
#define TRD_SPEC_ENTRY "trident_spec_v1"
#define TRD_SELECTOR_ENTRY "trident_selector_v1"

#endif /* TRIDENT_ABI_H */
