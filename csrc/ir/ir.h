// Host IR: the typed, printable program of one Specialization Cache Module.
//
// A Module holds specializations. Each Spec has the guards that must hold for a call to use it and a
// straight-line body. Values are of two families:
//   %N  tensor-like values (an argument, captured module state, or a result of a call/launch);
//   $N  64-bit symbolic integers computed natively (argument sizes, Python ints, arithmetic on them,
//       and data-dependent values: a tensor's element read with `item`, a result's size);
//   $fN doubles computed natively (Python float arguments, arithmetic on them). Ints and floats
//       share one id space: $3 and $f3 cannot both exist.
// The text form (printer.cpp / parser.cpp) is the interface between the Python lowering and the core,
// and the unit of golden tests. docs/host_ir.md describes the syntax with examples.
//
// This header depends on nothing but the standard library: no torch, no Python.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace trident::ir {

// A literal or a reference, as an operand of a call or an element of the output tree.
struct Operand {
  enum class Kind : uint8_t {
    None, Bool, Int, Float, Str,
    Dtype, Layout, MemFmt, Device,  // typed enum literals: i holds the c10 enum value
    Value,                          // %N
    Sym,                            // $N, or $fN (a float symbol) when j == 1
    List, Tuple, Dict,              // containers; Dict only in output trees (keys in `keys`)
    ArgRef, StateRef,               // arg(K), state(K): resolved tensor locations, only in the
                                    // call sites and output trees that codegen embeds in modules
    Ptr,                            // ptr(%N, off): %N's data pointer plus `off` bytes (an int or
                                    // $N), items {base, off}; a launch operand only: a view that
                                    // only kernels read needs no tensor object
    // Output trees only (the Python objects arguments hold, python/bindings/outputs.h):
    Node,     // node(K): the call's K-th container or object (flatten.h's visit order)
    PyRef,    // pyref(K): constant K of the process's object table (a class; arg_objects.h)
    Object,   // object(K) {"name": v, ...}: a new instance of class pyref(K), attributes keys/items;
              // object(K) call {...} (j == 1): the class called with those keyword arguments;
              // object(K) seq (v, ...) (j == 2): a tuple class (a namedtuple, a structseq such as
              // torch.return_types.topk) holding those items
    Update,   // update(K) {"name": v, ...} sets attributes of object node(K) (items of a dict
              // node); update(K) [v, ...] (j == 1)
              // replaces the contents of list node(K); evaluates to node(K)
    Effects,  // effects(u, ..., tree): the updates in order, then tree, which is the value
  };
  Kind kind = Kind::None;
  int64_t i = 0;          // Bool/Int/enum value, %N or $N id; Device: type (index in `j`)
  int64_t j = -1;         // Device index
  double f = 0.0;
  std::string s;          // Str
  std::vector<Operand> items;
  std::vector<std::string> keys;  // Dict, Object and Update attribute names, parallel to items
  // Dict and Update of a dict: per key, whether it is an int (its decimal text in `keys`; written
  // bare, `{0: v}`) rather than a str. Empty: every key a str.
  std::vector<bool> int_keys;
  bool int_key(size_t k) const { return k < int_keys.size() && int_keys[k]; }

  static Operand none() { return {}; }
  static Operand integer(int64_t v) { Operand o; o.kind = Kind::Int; o.i = v; return o; }
  static Operand value(int64_t id) { Operand o; o.kind = Kind::Value; o.i = id; return o; }
  static Operand sym(int64_t id) { Operand o; o.kind = Kind::Sym; o.i = id; return o; }
  static Operand fsym(int64_t id) { Operand o = sym(id); o.j = 1; return o; }
  bool is_fsym() const { return kind == Kind::Sym && j == 1; }
};

// A field of the call that a guard reads. Leaf fields name a flattened user argument.
struct Field {
  enum class Kind : uint8_t {
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) kind,
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
  };
  // Where a field is read (ir/guard_fields.def): of the call, of a leaf, of a leaf's dimension.
  enum class Shape : uint8_t { CALL, LEAF, DIM };
  Kind kind = Kind::GradMode;
  int32_t leaf = -1;   // for leaf fields
  int32_t index = -1;  // dimension for Size/Stride
  bool operator==(const Field& o) const {
    return kind == o.kind && leaf == o.leaf && index == o.index;
  }
};

struct Expr;

// An atomic guard: `field op rhs`, where rhs is a literal or another field; or, when `expr` is set,
// an integer expression over fields that must be nonzero (ir/expr.h), for symbolic-shape relations.
struct Guard {
  std::shared_ptr<const Expr> expr;
  enum class Op : uint8_t { Eq, Ne, Ge, Le, Gt, Lt, DivisibleBy, NotDivisibleBy };
  Field lhs;
  Op op = Op::Eq;
  bool rhs_is_field = false;
  Field rhs_field;
  int64_t rhs_int = 0;      // integer fields
  double rhs_float = 0.0;   // FloatValue comparisons; == and != against it compare bit patterns
};

// One instruction of a body.
struct Instr {
  enum class Kind : uint8_t {
    Arg,      // %r = arg K           (user leaf K, a tensor)
    State,    // %r = state K         (captured module state K)
    SymLeaf,  // $r = int K           (Python int/bool leaf K)
    SymSize,  // $r = size %v, d      (any tensor value: an argument's is read from its leaf)
    SymStride,// $r = stride %v, d
    Item,     // $r = item %v / $fr = item %v (b == 1): the number a one-element tensor holds
              // (a host read: synchronizes with the device for a CUDA tensor, as .item() does)
    Check,    // check $a, "message": the call fails with RuntimeError(message) unless $a != 0;
              // expect $a, "message" (b == 1): unless $a != 0, the call's data took another
              // branch than the one traced: the run stops (nothing written yet) and the call
              // goes to another specialization (a data-dependent branch, data_values.py)
    SymBin,   // $r = <op> a, b       (a, b: $N or int literal)
    FloatLeaf,// $fr = float K        (Python float leaf K)
    FloatOp,  // $fr = <fop> a[, b]   (a, b: $fN or float literal; itof takes $N or an int)
    Call,     // %r... = call "ns::op.overload" (operands)
    Launch,   // launch K grid(g0, g1, g2) (operands)      -- Triton kernel K of the module
    Release,  // release %v           (planner: last use passed)
    Return,   // return <tree>
  };
  // Eq..Ge give 1 or 0 (a data-dependent value's runtime assertions, `check`).
  enum class BinOp : uint8_t { Add, Sub, Mul, FloorDiv, Mod, Min, Max, CeilDiv, Eq, Ne, Lt, Le, Gt, Ge };
  // Python float semantics: fdiv by zero and fsqrt of a negative fail the call as Python raises;
  // fpow fails where Python's result would be complex or raise (a negative base with a fractional
  // exponent, zero to a negative power).
  enum class FloatOp : uint8_t { Add, Sub, Mul, Div, Pow, Neg, Sqrt, FromInt };
  Kind kind = Kind::Return;
  std::vector<int64_t> results;  // %ids (Call) or the $id (Sym*) or %id (Arg/State)
  int64_t a = 0;                 // Arg/State/SymLeaf: leaf index; SymSize/Stride: %v; Launch: kernel
  int64_t b = 0;                 // SymSize/Stride: dim
  BinOp binop = BinOp::Add;
  FloatOp fop = FloatOp::Add;
  std::string op;                // Call: qualified operator name with overload; Check: message
  std::vector<Operand> operands; // Call/Launch arguments, SymBin's two operands, Return: one tree
  std::vector<Operand> grid;     // Launch: three grid dimensions ($N or int)
};

// A compiled Triton kernel a spec launches: the cubin on disk and exactly what Triton 3.6's own
// launcher needs (its nvidia driver.py). `params` lists the C type of each runtime parameter in
// launch order (constexprs and ints equal to 1 already dropped; the two scratch pointers are not
// listed, the runtime appends them).
// A kernel parameter that is a host-side tensor descriptor lowered to TMA (`tmadesc` in
// Kernel::params): how its CUtensorMap is encoded at each launch from the launch's tensor (the
// descriptor's base viewed with its shape and strides), as the compiled kernel's metadata says
// (runtime/launch/tma_args.h). Text: `tma SWIZZLE ELEM_SIZE ELEM_TYPE FP4 NAN B0 B1 ...`.
struct TmaParam {
  int32_t swizzle = 0, elem_size = 0, elem_type = 0;
  bool fp4_padded = false, nan_padding = false;
  std::vector<int64_t> block;  // the block shape, in the tensor's order (its rank)
};

struct Kernel {
  int32_t id = 0;               // spec-local in a spec; module-wide inside a built module
  std::string name;             // the cubin's function name
  std::string cubin;            // path of the cubin file
  std::string params;           // comma-separated C types: ptr,i32,u32,i64,u64,i8,u8,i16,u16,fp16,bf16,fp32,fp64,tmadesc
  int32_t num_warps = 4, num_ctas = 1, shared = 0;
  int64_t global_scratch = 0, global_scratch_align = 1, profile_scratch = 0, profile_scratch_align = 1;
  int32_t launch_pdl = 0, cooperative = 0;
  std::vector<TmaParam> tma;    // one per `tmadesc` in params, in order
};

struct Spec {
  int32_t id = 0;
  std::string structure;        // argument structure string the bindings compute
  std::vector<Guard> guards;
  std::vector<Kernel> kernels;  // launched by `launch K` instructions of this spec
  // User tensor leaves the body writes (in place, by ATen or by a kernel), ascending: `writes 0, 3`.
  // The runtime's graph mode copies only leaves outside this list into its static buffers.
  std::vector<int32_t> writes;
  // Nonempty: why the body may not run as a CUDA graph (it computes on the host, which a replay
  // would not repeat): `graph off "a tensor on the CPU ..."`.
  std::string graph_off;
  // Nonempty: the body reads a device value on the host (`item`) and where it first does, with the
  // user's line: `graph reads "it reads a device value on the host at model.py:12 (...)"`. A CUDA
  // graph of it is split there into segments (spec_graphs.h, Segments), or graph mode is off for it
  // with this as the reason.
  std::string host_read;
  std::vector<Instr> body;
};

struct Module {
  std::vector<Spec> specs;
};

// Names shared by printer, parser and codegen.
const char* field_name(Field::Kind k);
Field::Shape field_shape(Field::Kind k);
constexpr int kNumFieldKinds = 0
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) + 1
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
    ;
const char* guard_op_name(Guard::Op op);
const char* float_op_name(Instr::FloatOp op);   // fadd fsub fmul fdiv fpow fneg fsqrt itof
int float_op_arity(Instr::FloatOp op);
const char* binop_name(Instr::BinOp op);

}  // namespace trident::ir
