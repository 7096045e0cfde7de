// trident._C: the extension module. Registers the SCM type and exposes the core's text-in,
// text-out entry points (parse/print, verify, passes, code generation) for the Python layer and
// for golden tests.
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>

#include "arg_objects.h"
#include "codegen/emit_c.h"
#include "errors.h"
#include "codegen/toolchain.h"
#include "flatten.h"
#include "guards/decision.h"
#include "guards/explain.h"
#include "ir/text.h"
#include "ir/verifier.h"
#include "planner/liveness.h"
#include "result_objects.h"
#include "runtime/gemm/aten_typed_gemm.h"
#include "runtime/gemm/lt_gemm.h"
#include "runtime/replay/op_replay.h"
#include "runtime/memory/private_pool.h"
#include "runtime/graphs/rebind_words.h"
#include "runtime/graphs/scalar_patch.h"
#include "scm_object.h"
#include "selector_builds.h"

namespace trident::bindings {
namespace {

// Runs `fn` on the module parsed from `arg` (a str); maps core exceptions to Python ones:
// ParseError/VerifyError are the caller's IR mistakes (ValueError), anything else RuntimeError.
template <typename Fn>
PyObject* with_module(PyObject* arg, Fn fn) {
  const char* text = PyUnicode_AsUTF8(arg);
  if (!text) return nullptr;
  try {
    ir::Module m = ir::parse_module(text);
    std::string out = fn(m);
    return PyUnicode_FromStringAndSize(out.data(), static_cast<Py_ssize_t>(out.size()));
  } catch (const std::exception& e) {
    set_python_error(e);
  }
  return nullptr;
}

PyObject* py_ir_print(PyObject*, PyObject* arg) {
  return with_module(arg, [](ir::Module& m) { return ir::print(m); });
}

PyObject* py_ir_verify(PyObject*, PyObject* arg) {
  return with_module(arg, [](ir::Module& m) { ir::verify(m); return ir::print(m); });
}

PyObject* py_ir_pass(PyObject*, PyObject* args) {
  const char* name = nullptr;
  PyObject* text = nullptr;
  if (!PyArg_ParseTuple(args, "sU", &name, &text)) return nullptr;
  std::string pass = name;
  return with_module(text, [&](ir::Module& m) -> std::string {
    ir::verify(m);
    if (pass == "liveness") {
      for (auto& s : m.specs) planner::insert_releases(s);
      return ir::print(m);
    }
    if (pass == "select") return guards::emit_select(m.specs).source;
    if (pass == "emit_c") {  // the selector, then each spec's object as compiled and what describes it
      codegen::EmittedModule e = codegen::emit_module(m);
      std::string out = e.selector.source;
      for (const auto& spec : e.specs) {
        out += spec.source;
        for (size_t k = 0; k < spec.sites.size(); ++k) out += "site " + std::to_string(k) + " = " + ir::quote(spec.sites[k]) + "\n";
        for (size_t k = 0; k < spec.kernels.size(); ++k)
          out += "kernel " + std::to_string(k) + " = " + ir::quote(spec.kernels[k]) + "\n";
        out += "output = " + ir::quote(spec.output) + "\n";
      }
      return out;
    }
    if (pass == "graph_scalars") {  // per spec, why its CUDA graphs are keyed by its scalars ("" if not)
      std::string out;
      for (const auto& s : m.specs) out += "spec " + std::to_string(s.id) + ": " + runtime::ScalarPatch::keyed_by(s) + "\n";
      return out;
    }
    if (pass == "direct_results") {  // per spec, the results its graphs may write directly (direct_results.h)
      std::string out;
      for (const auto& s : m.specs) {
        const codegen::EmittedSpec e = codegen::emit_spec(s);
        std::vector<ir::Instr> sites;
        for (const auto& t : e.sites) sites.push_back(ir::parse_instr(t));
        std::vector<ir::Kernel> kernels;
        for (const auto& t : e.kernels) kernels.push_back(ir::parse_kernel(t));
        out += "spec " + std::to_string(s.id) + ":\n" +
               runtime::describe(runtime::direct_results(sites, kernels, ir::parse_operand(e.output)), sites);
      }
      return out;
    }
    throw std::invalid_argument("unknown pass '" + pass +
                                "': expected liveness, select, emit_c, graph_scalars or direct_results");
  });
}

PyObject* leaf_dict(const trd_leaf& l) {
  PyObject* sizes = PyTuple_New(l.dim);
  PyObject* strides = PyTuple_New(l.dim);
  for (int d = 0; d < l.dim; ++d) {
    PyTuple_SET_ITEM(sizes, d, PyLong_FromLongLong(l.sizes[d]));
    PyTuple_SET_ITEM(strides, d, PyLong_FromLongLong(l.strides[d]));
  }
  return Py_BuildValue("{s:i,s:i,s:i,s:i,s:i,s:i,s:K,s:N,s:N,s:L,s:K,s:L,s:d}", "kind", l.kind, "dtype", l.dtype,
                       "device_type", l.device_type, "device_index", l.device_index, "dim", l.dim, "flags", l.flags,
                       "keyset", (unsigned long long)l.keyset, "sizes", sizes, "strides", strides, "storage_offset",
                       (long long)l.storage_offset, "data_ptr", (unsigned long long)l.data_ptr, "ival",
                       (long long)l.ival, "fval", l.fval);
}

// register_object_class(cls) -> N: instances of cls are flattened by attributes from now on (the
// Python layer checks that cls qualifies: arg_objects.py).
PyObject* py_register_object_class(PyObject*, PyObject* cls) {
  if (!PyType_Check(cls)) {
    PyErr_SetString(PyExc_TypeError, "register_object_class(cls): cls must be a class");
    return nullptr;
  }
  return PyLong_FromLong(register_object_class(cls));
}

// intern(obj) -> N: obj's number in the process's object table (pyref(N) in output trees).
PyObject* py_intern(PyObject*, PyObject* obj) { return PyLong_FromLong(intern_object(obj)); }

// interned(N) -> obj: the object numbered N, also one the flattener numbered itself (a structure's
// c<N> or e<N> constant); KeyError when this process numbered none.
PyObject* py_interned(PyObject*, PyObject* n) {
  const long long k = PyLong_AsLongLong(n);
  if (k == -1 && PyErr_Occurred()) return nullptr;
  PyObject* obj = interned_object(k);
  if (!obj) {
    PyErr_SetObject(PyExc_KeyError, n);
    return nullptr;
  }
  Py_INCREF(obj);
  return obj;
}

// describe_args(*args, **kwargs) -> (structure, [leaf dict, ...]) or (None, reason): exactly what the
// hot path computes, so the guards Python writes compare against the same numbers.
PyObject* py_describe_args(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  try {
    FlatArgs flat;
    if (!flatten_args(args, PyVectorcall_NARGS(nargsf), kwnames, flat))
      return Py_BuildValue("(Os)", Py_None, flat.unsupported.c_str());
    PyObject* leaves = PyList_New(0);
    for (const auto& l : flat.leaves) {
      PyObject* d = leaf_dict(l);
      PyList_Append(leaves, d);
      Py_DECREF(d);
    }
    return Py_BuildValue("(sN)", flat.structure.c_str(), leaves);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

// spec_rejects(spec_text, *args, **kwargs) -> "" when the spec's guards accept this call, else the
// first guard that fails: lets the controller check a specialization before installing it.
PyObject* py_spec_rejects(PyObject*, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "spec_rejects(spec_text, *args, **kwargs): spec_text must be a str");
    return nullptr;
  }
  try {
    ir::Module m = ir::parse_module(PyUnicode_AsUTF8(args[0]));
    if (m.specs.size() != 1) throw ir::ParseError("spec_rejects takes exactly one spec");
    FlatArgs flat;
    if (!flatten_args(args + 1, nargs - 1, kwnames, flat)) return PyUnicode_FromString(flat.unsupported.c_str());
    return PyUnicode_FromString(guards::first_failure(m.specs[0], make_call(flat)).c_str());
  } catch (const std::exception& e) {
    set_python_error(e);
    return nullptr;
  }
}

PyObject* py_describe_tensor(PyObject*, PyObject* arg) {
  if (!THPVariable_Check(arg)) {
    PyErr_SetString(PyExc_TypeError, "describe_tensor expects a torch.Tensor");
    return nullptr;
  }
  trd_leaf l;
  std::memset(&l, 0, sizeof l);
  if (!fill_tensor_leaf(THPVariable_Unpack(arg), l)) Py_RETURN_NONE;
  return leaf_dict(l);
}

PyObject* py_bump_state_epoch(PyObject*, PyObject*) {
  bump_state_epoch();
  Py_RETURN_NONE;
}

PyObject* py_cache_dir(PyObject*, PyObject*) { return PyUnicode_FromString(codegen::cache_dir().c_str()); }

// The validated cache subdirectory `name` (cache_dir.h): private to the user, or a private fallback.
PyObject* py_cache_subdir(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  try {
    std::string dir = codegen::cache_subdir(name);
    if (!emit_cache_warnings()) return nullptr;
    return PyUnicode_FromString(dir.c_str());
  } catch (const std::exception& e) {
    set_python_error(e);
    return nullptr;
  }
}

// Reads a cache file if it may be trusted (cache_dir.h): (bytes, "") or (None, why not).
PyObject* py_read_private_file(PyObject*, PyObject* arg) {
  const char* path = PyUnicode_AsUTF8(arg);
  if (!path) return nullptr;
  std::string content;
  std::string why = codegen::read_private_file(path, content);
  if (!why.empty()) return Py_BuildValue("(Os)", Py_None, why.c_str());
  PyObject* bytes = PyBytes_FromStringAndSize(content.data(), static_cast<Py_ssize_t>(content.size()));  // new ref
  return bytes ? Py_BuildValue("(Ns)", bytes, "") : nullptr;  // N: the tuple takes the reference
}

// [(reason, count)] as a Python list (new reference).
PyObject* reason_list(const std::vector<std::pair<std::string, int64_t>>& reasons) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(reasons.size()));  // new ref
  if (!list) return nullptr;
  for (size_t i = 0; i < reasons.size(); ++i) {
    PyObject* item = Py_BuildValue("(sL)", reasons[i].first.c_str(), (long long)reasons[i].second);  // new ref
    if (!item) return Py_DECREF(list), nullptr;
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), item);  // steals item
  }
  return list;
}

// [(reason, sites)] for the cuBLASLt sites of this process that do not replay (lt_gemm.h).
PyObject* py_cublaslt_replay_refusals(PyObject*, PyObject*) { return reason_list(runtime::replay_refusals()); }

// [(reason, sites)] for the ATen call sites of this process that stopped replaying (op_replay.h).
PyObject* py_aten_replay_refusals(PyObject*, PyObject*) { return reason_list(runtime::OpReplay::refusals()); }

// _set_aten_replay(on) -> previous: whether modules loaded from now on get ATen replay sites (a
// diagnostic switch for A/B measurements; TRIDENT_ATEN_REPLAY sets the start value).
PyObject* py_set_aten_replay(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  return PyBool_FromLong(runtime::OpReplay::set_enabled_for_new_modules(on != 0));
}

// _set_linear_nd(on) -> previous: whether linear sites of modules loaded from now on multiply a
// contiguous N-D input without views (aten_typed_gemm.h; a diagnostic switch for A/B measurements).
PyObject* py_set_linear_nd(PyObject*, PyObject* arg) {
  const int on = PyObject_IsTrue(arg);
  if (on < 0) return nullptr;
  return PyBool_FromLong(runtime::typed::set_linear_nd_for_new_modules(on != 0));
}

// Whether Python may be called: a module destroyed while the interpreter finalizes releases its
// pools without it (the process is ending; the memory goes with it).
bool python_callable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// Calls fn(device, pool) or fn(device, stream) under the GIL; the result (new reference) or nullptr
// with the error cleared.
PyObject* call_pool_fn(PyObject* fn, int device, const runtime::PoolId* pool, void* stream = nullptr) {
  if (!python_callable()) return nullptr;
  PyGILState_STATE g = PyGILState_Ensure();
  PyObject* r = pool ? PyObject_CallFunction(fn, "i(KK)", device, (unsigned long long)(*pool)[0],
                                             (unsigned long long)(*pool)[1])
                     : PyObject_CallFunction(fn, "iK", device, (unsigned long long)(uintptr_t)stream);
  if (!r) PyErr_Clear();
  PyGILState_Release(g);
  return r;
}

// set_private_pool_api(begin, end, release, segments): PyTorch's routing of a thread's CUDA
// allocations to a private pool (trident._compat.private_pool_api), for the ATen replay sites and
// graph captures (private_pool.h): begin(device, caller stream handle) -> pool id (two ints),
// end(device, pool), release(device, pool) (python/trident/recording_pools.py), segments(device,
// pool) -> [(address, bytes)]. Kept for the process.
PyObject* py_set_private_pool_api(PyObject*, PyObject* args) {
  PyObject *begin, *end, *release, *segments;
  if (!PyArg_ParseTuple(args, "OOOO", &begin, &end, &release, &segments)) return nullptr;
  if (!PyCallable_Check(begin) || !PyCallable_Check(end) || !PyCallable_Check(release) || !PyCallable_Check(segments)) {
    PyErr_SetString(PyExc_TypeError, "set_private_pool_api(begin, end, release, segments) takes four callables");
    return nullptr;
  }
  Py_INCREF(begin), Py_INCREF(end), Py_INCREF(release), Py_INCREF(segments);  // kept for the process
  runtime::PrivatePoolApi api;
  api.begin = [begin](int device, void* stream, runtime::PoolId* pool) {
    PyObject* r = call_pool_fn(begin, device, nullptr, stream);
    if (!r) return false;
    PyGILState_STATE g = PyGILState_Ensure();
    unsigned long long a = 0, b = 0;
    const bool ok = PyArg_ParseTuple(r, "KK", &a, &b);
    if (!ok) PyErr_Clear();
    Py_DECREF(r);
    PyGILState_Release(g);
    if (ok) *pool = {a, b};
    return ok;
  };
  auto forward = [](PyObject* fn) {
    return [fn](int device, const runtime::PoolId& pool) {
      PyObject* r = call_pool_fn(fn, device, &pool);
      if (!r) return;
      PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(r);
      PyGILState_Release(g);
    };
  };
  api.end = forward(end);
  api.release = forward(release);
  api.segments = [segments](int device, const runtime::PoolId& pool) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    PyObject* r = call_pool_fn(segments, device, &pool);
    if (!r) return out;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject* seq = PySequence_Fast(r, "segments() returns a sequence");  // new ref
    for (Py_ssize_t i = 0; seq && i < PySequence_Fast_GET_SIZE(seq); ++i) {
      unsigned long long addr = 0, bytes = 0;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "KK", &addr, &bytes)) {
        out.clear();  // unknown segments: no plan rather than a partial one
        break;
      }
      out.emplace_back(addr, addr + bytes);
    }
    if (PyErr_Occurred()) PyErr_Clear();
    Py_XDECREF(seq);
    Py_DECREF(r);
    PyGILState_Release(g);
    return out;
  };
  runtime::set_private_pool_api(std::move(api));
  Py_RETURN_NONE;
}

// _rebind_word(va, vb, vc, args, pool) -> (kind, arg, delta): how a graph word with values va, vb,
// vc in three captures relates to the arguments [(ptr, extent, shift)] and the pool [(begin, end)]
// (runtime/graphs/rebind_words.h). For tests of the rules on machines without a GPU.
PyObject* py_rebind_word(PyObject*, PyObject* args) {
  unsigned long long va, vb, vc;
  PyObject *py_args, *py_pool;
  if (!PyArg_ParseTuple(args, "KKKOO", &va, &vb, &vc, &py_args, &py_pool)) return nullptr;
  std::vector<runtime::RebindArg> rargs;
  runtime::AddressRanges pool;
  auto read = [](PyObject* seq, const char* what, auto&& add) {
    PyObject* fast = PySequence_Fast(seq, what);  // new ref
    if (!fast) return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); ++i)
      if (!add(PySequence_Fast_GET_ITEM(fast, i))) return Py_DECREF(fast), false;
    Py_DECREF(fast);
    return true;
  };
  const bool ok =
      read(py_args, "args: a sequence of (ptr, extent, shift)", [&](PyObject* t) {
        runtime::RebindArg r;
        unsigned long long p, e, sh;
        if (!PyArg_ParseTuple(t, "KKK", &p, &e, &sh)) return false;
        r.ptr = p, r.extent = e, r.shift = sh;
        rargs.push_back(r);
        return true;
      }) &&
      read(py_pool, "pool: a sequence of (begin, end)", [&](PyObject* t) {
        unsigned long long b, e;
        if (!PyArg_ParseTuple(t, "KK", &b, &e)) return false;
        pool.emplace_back(b, e);
        return true;
      });
  if (!ok) return nullptr;
  int arg = -1;
  uint64_t delta = 0;
  const runtime::Word w = runtime::WordClassifier{rargs, pool}.classify(va, vb, vc, &arg, &delta);
  static const char* const names[] = {"site", "unmoved", "pool", "encoded", "no_shift", "stuck"};
  return Py_BuildValue("(siK)", names[static_cast<int>(w)], arg, (unsigned long long)delta);
}

PyMethodDef methods[] = {
    {"ir_print", py_ir_print, METH_O, "Parse host IR text and print it canonically."},
    {"ir_verify", py_ir_verify, METH_O, "Verify host IR text; returns it canonically or raises ValueError."},
    {"ir_pass", py_ir_pass, METH_VARARGS, "ir_pass(name, text): run 'liveness', 'select', 'emit_c', 'graph_scalars' or 'direct_results'."},
    {"describe_args", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_describe_args)),
     METH_FASTCALL | METH_KEYWORDS, "Flatten call arguments as the hot path does."},
    {"describe_tensor", py_describe_tensor, METH_O, "One tensor as a guard leaf dict."},
    {"register_object_class", py_register_object_class, METH_O,
     "register_object_class(cls) -> N: flatten instances of cls by their attributes."},
    {"intern", py_intern, METH_O, "intern(obj) -> N: obj's number in the object table (pyref(N))."},
    {"interned", py_interned, METH_O, "interned(N) -> obj: the object numbered N (KeyError if none)."},
    {"spec_rejects", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(py_spec_rejects)),
     METH_FASTCALL | METH_KEYWORDS, "spec_rejects(spec_text, *args, **kwargs): '' or the first failing guard."},
    {"bump_state_epoch", py_bump_state_epoch, METH_NOARGS, "Module state may have been re-registered."},
    {"cache_dir", py_cache_dir, METH_NOARGS, "Where compiled modules are cached (as configured)."},
    {"cache_subdir", py_cache_subdir, METH_O, "The validated private cache subdirectory of this name."},
    {"read_private_file", py_read_private_file, METH_O, "(bytes, '') for a trusted cache file, else (None, why)."},
    {"cublaslt_replay_refusals", py_cublaslt_replay_refusals, METH_NOARGS,
     "[(reason, sites)]: why cuBLASLt sites of this process do not replay their recorded launches."},
    {"aten_replay_refusals", py_aten_replay_refusals, METH_NOARGS,
     "[(reason, sites)]: why ATen call sites of this process stopped replaying their recorded launches."},
    {"_set_aten_replay", py_set_aten_replay, METH_O,
     "_set_aten_replay(on) -> previous: ATen replay sites for modules loaded from now on (diagnostics)."},
    {"_set_linear_nd", py_set_linear_nd, METH_O,
     "_set_linear_nd(on) -> previous: N-D linear inputs without views, for modules loaded from now on (diagnostics)."},
    {"_rebind_word", py_rebind_word, METH_VARARGS, "_rebind_word(va, vb, vc, args, pool): a graph word's kind (tests)."},
    {"set_private_pool_api", py_set_private_pool_api, METH_VARARGS,
     "set_private_pool_api(begin, end, release, segments): private-pool routing for replay sites and graphs."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "trident._C", "torch-trident native core", -1, methods};

}  // namespace
}  // namespace trident::bindings

namespace trident::bindings {
constexpr const char* shape_word_CALL = "call";
constexpr const char* shape_word_LEAF = "leaf";
constexpr const char* shape_word_DIM = "dim";
}  // namespace trident::bindings

PyMODINIT_FUNC PyInit__C() {
  PyObject* m = PyModule_Create(&trident::bindings::module_def);
  if (!m) return nullptr;
  if (!trident::bindings::register_scm_type(m)) return nullptr;
  trident::bindings::install_result_object_check();
  // No selector build thread may be inside the toolchain while static objects are destroyed.
  Py_AtExit(trident::bindings::wait_for_selector_builds);
  PyModule_AddIntConstant(m, "ABI_VERSION", TRD_ABI_VERSION);
  PyModule_AddIntConstant(m, "MAX_DIM", TRD_MAX_DIM);
  // trd_leaf.kind, for the Python side's leaf descriptions (describe_args): one numbering.
  PyModule_AddIntConstant(m, "LEAF_NONE", TRD_NONE);
  PyModule_AddIntConstant(m, "LEAF_TENSOR", TRD_TENSOR);
  PyModule_AddIntConstant(m, "LEAF_INT", TRD_INT);
  PyModule_AddIntConstant(m, "LEAF_FLOAT", TRD_FLOAT);
  PyModule_AddIntConstant(m, "LEAF_BOOL", TRD_BOOL);
  // The guard vocabulary (ir/guard_fields.def): ((spelling, shape), ...), shape "call", "leaf" or "dim".
  PyObject* fields = Py_BuildValue("("
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) "(ss)"
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
                                   ")"
#define TRD_GUARD_FIELD(kind, spelling, shape, member, type) , spelling, trident::bindings::shape_word_##shape
#include "ir/guard_fields.def"
#undef TRD_GUARD_FIELD
  );
  if (!fields || PyModule_AddObject(m, "GUARD_FIELDS", fields) < 0) {
    Py_XDECREF(fields);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
