#include "flatten.h"

#include <ATen/Context.h>
#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Size.h>
#include <torch/csrc/autograd/python_variable.h>

#include <charconv>
#include <cstdio>
#include <cstring>

#include "arg_objects.h"

namespace trident::bindings {
namespace {

constexpr int kMaxDepth = 8;

// Where an object stands decides which constants (add_constant) it may be: an argument itself or an
// object's attribute may be any; an item of a tuple, list or dict only a str, the one export takes
// both as an input that its trace specializes on and as an output (a capture returns the call's
// lists and dicts); an item of an object flattened by its items (a ModelOutput) none.
enum class Place { kArgument, kAttribute, kItem, kObjectItem };
bool add(PyObject* obj, FlatArgs& out, int depth, Place place);

// Appends v in decimal (std::to_chars: no locale, no format parsing; snprintf was a tenth of a
// 36-layer StaticCache's flattening).
template <typename Int>
void append_int(std::string& s, Int v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  s.append(buf, r.ptr);
}

// A dict key or attribute name that may appear in the structure string: a str that is an
// identifier, so that the string stays unambiguous. Sets *name/*len to its UTF-8 bytes. ASCII
// names (all of them, in practice) are checked here, [A-Za-z_][A-Za-z0-9_]* being exactly
// str.isidentifier() on ASCII; others go to PyUnicode_IsIdentifier. Returns false without an error set.
bool identifier_name(PyObject* key, const char** name, Py_ssize_t* len) {
  if (!PyUnicode_CheckExact(key)) return false;
  if (PyUnicode_IS_ASCII(key)) {
    const auto* p = static_cast<const unsigned char*>(PyUnicode_DATA(key));
    const Py_ssize_t n = PyUnicode_GET_LENGTH(key);
    auto letter = [](unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
    if (n == 0 || !letter(p[0])) return false;
    for (Py_ssize_t k = 1; k < n; ++k)
      if (!letter(p[k]) && !(p[k] >= '0' && p[k] <= '9')) return false;
    *name = reinterpret_cast<const char*>(p);
    *len = n;
    return true;
  }
  if (!PyUnicode_IsIdentifier(key)) return false;
  *name = PyUnicode_AsUTF8AndSize(key, len);
  if (!*name) PyErr_Clear();
  return *name != nullptr;
}

// enum.Enum, looked up once (a strong reference); null if the import failed.
PyTypeObject* enum_type() {
  static PyObject* type = [] {
    PyObject* mod = PyImport_ImportModule("enum");
    PyObject* t = mod ? PyObject_GetAttrString(mod, "Enum") : nullptr;
    Py_XDECREF(mod);
    if (!t) PyErr_Clear();
    return t;
  }();
  return type && PyType_Check(type) ? reinterpret_cast<PyTypeObject*>(type) : nullptr;
}

bool is_enum_member(PyObject* obj) {
  PyTypeObject* e = enum_type();
  return e && PyType_IsSubtype(Py_TYPE(obj), e);
}

// A value that is a constant of the call rather than a leaf: a str, a dtype, a device, a class or
// an enum member, guarded by value (a class and an enum member by identity) in the structure
// string. `place` narrows which (Place); mirrored by arg_objects.is_constant.
bool add_constant(PyObject* obj, FlatArgs& out, Place place) {
  std::string& s = out.structure;
  if (place == Place::kObjectItem) return false;
  if (PyUnicode_CheckExact(obj)) {  // exact: a StrEnum member is an enum member (below)
    Py_ssize_t n = 0;
    const char* text = PyUnicode_AsUTF8AndSize(obj, &n);
    if (!text) {
      PyErr_Clear();
      out.unsupported = "a str that is not valid UTF-8 is not supported natively";
      return false;
    }
    s += 's';  // length-prefixed: any bytes may follow
    append_int(s, n);
    s += ':';
    s.append(text, static_cast<size_t>(n));
  } else if (place == Place::kItem) {
    return false;  // export takes no dtype, device, class or enum member as an input or output
  } else if (THPDtype_Check(obj)) {
    s += 'y';
    append_int(s, static_cast<int>(reinterpret_cast<THPDtype*>(obj)->scalar_type));
  } else if (THPDevice_Check(obj)) {
    const c10::Device& d = reinterpret_cast<THPDevice*>(obj)->device;
    s += 'd';
    append_int(s, static_cast<int>(d.type()));
    s += '.';
    append_int(s, static_cast<int>(d.index()));
  } else if (PyType_Check(obj)) {
    s += 'c';
    append_int(s, intern_object(obj));
  } else if (is_enum_member(obj)) {  // last: the common constants above skip its subtype walk
    s += 'e';
    append_int(s, intern_object(obj));
  } else {
    return false;
  }
  return true;
}

// An instance of a registered tuple class (a namedtuple or structseq: pytree flattens both by
// position), as "<id(...)>": its items as a tuple's, a str among them guarded by value.
bool add_sequence(PyObject* obj, int32_t class_id, FlatArgs& out, int depth) {
  out.nodes.push_back(obj);
  out.structure += '<';
  append_int(out.structure, class_id);
  out.structure += '(';
  const Py_ssize_t n = PyTuple_GET_SIZE(obj);
  for (Py_ssize_t k = 0; k < n; ++k) {
    if (!add(PyTuple_GET_ITEM(obj, k), out, depth + 1, Place::kItem)) {  // borrowed
      out.where = "[" + std::to_string(k) + "]" + out.where;
      return false;
    }
  }
  out.structure += ")>";
  return true;
}

// An instance of a registered class (arg_objects.h): its instance dictionary's entries in
// insertion order, as "<id{name=code,...}>"; for a dict subclass (a transformers ModelOutput, which
// its library registers as a pytree node flattened by its items), its items instead, none a
// constant; for a tuple subclass, add_sequence. `depth` is the object's own.
bool add_object(PyObject* obj, int32_t class_id, FlatArgs& out, int depth) {
  if (PyTuple_Check(obj)) return add_sequence(obj, class_id, out, depth);
  const bool items = PyDict_Check(obj);
  PyObject* dict = items ? (Py_INCREF(obj), obj) : PyObject_GenericGetDict(obj, nullptr);  // new ref
  if (!dict) {
    PyErr_Clear();
    out.unsupported = std::string(Py_TYPE(obj)->tp_name) + " without an instance dictionary is not supported natively";
    return false;
  }
  out.nodes.push_back(obj);
  out.structure += '<';
  append_int(out.structure, class_id);
  out.structure += '{';
  Py_ssize_t pos = 0;
  PyObject *key, *value;  // borrowed
  bool ok = true;
  for (bool first = true; ok && PyDict_Next(dict, &pos, &key, &value); first = false) {
    const char* name = nullptr;
    Py_ssize_t len = 0;
    if (!identifier_name(key, &name, &len)) {
      out.unsupported = std::string(Py_TYPE(obj)->tp_name) + " with an attribute whose name is not an identifier "
                        "is not supported natively";
      ok = false;
      break;
    }
    if (!first) out.structure += ',';
    out.structure.append(name, static_cast<size_t>(len));
    out.structure += '=';
    if (!add(value, out, depth + 1, items ? Place::kObjectItem : Place::kAttribute)) {
      out.where = (items ? "['" + std::string(name, static_cast<size_t>(len)) + "']"
                         : "." + std::string(name, static_cast<size_t>(len))) + out.where;
      ok = false;
    }
  }
  Py_DECREF(dict);
  if (ok) out.structure += "}>";
  return ok;
}

// On failure `out.unsupported` names the type and `out.where` the path below the argument; the
// caller prefixes which argument held it.
bool add(PyObject* obj, FlatArgs& out, int depth, Place place) {
  trd_leaf leaf;
  std::memset(&leaf, 0, sizeof leaf);
  if (THPVariable_CheckExact(obj)) {
    const at::Tensor& t = THPVariable_Unpack(obj);
    // Inside torch.func's transforms a tensor is a wrapper whose meaning lives in Python (vmap's
    // batching, grad's levels, functionalize): such calls run the original function eagerly.
    constexpr c10::DispatchKeySet transformed = c10::DispatchKeySet({c10::DispatchKey::FuncTorchBatched,
        c10::DispatchKey::FuncTorchGradWrapper, c10::DispatchKey::Functionalize,
        c10::DispatchKey::BatchedNestedTensor});
    if (t.key_set().has_any(transformed)) {
      out.unsupported = "a tensor of a torch.func transform (vmap, grad, jacrev, functionalize) is not supported "
                        "natively; trident does not compile inside these transforms";
      return false;
    }
    if (!fill_tensor_leaf(t, leaf)) {
      out.unsupported = t.is_nested() ? std::string("a nested tensor is not supported natively")
                                      : "a tensor of rank " + std::to_string(t.dim()) + " and layout " +
                                            c10::toString(t.layout()) + " is not supported natively";
      return false;
    }
    out.structure += 'T';
    out.tensors.push_back(&t);
  } else if (obj == Py_None) {
    leaf.kind = TRD_NONE;
    out.structure += 'n';
    out.tensors.push_back(nullptr);
  } else if (PyBool_Check(obj)) {
    leaf.kind = TRD_BOOL;
    leaf.ival = obj == Py_True;
    out.structure += 'b';
    out.tensors.push_back(nullptr);
  } else if (PyLong_CheckExact(obj)) {
    int overflow = 0;
    leaf.ival = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow) {
      out.unsupported = "an int that does not fit in 64 bits is not supported natively";
      return false;
    }
    leaf.kind = TRD_INT;
    out.structure += 'i';
    out.tensors.push_back(nullptr);
  } else if (PyFloat_CheckExact(obj)) {
    leaf.kind = TRD_FLOAT;
    leaf.fval = PyFloat_AS_DOUBLE(obj);
    out.structure += 'f';
    out.tensors.push_back(nullptr);
  } else if ((PyTuple_CheckExact(obj) || PyList_CheckExact(obj) || THPSize_Check(obj)) && depth < kMaxDepth) {
    // a torch.Size is a tuple of ints marked 'z' (the capture hands export a tuple in its place
    // and makes the Size again inside the trace: compiled.py, _items_at)
    bool tuple = !PyList_CheckExact(obj);
    out.nodes.push_back(obj);
    if (THPSize_Check(obj)) out.structure += 'z';
    out.structure += tuple ? '(' : '[';
    Py_ssize_t n = tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
    for (Py_ssize_t k = 0; k < n; ++k) {
      PyObject* item = tuple ? PyTuple_GET_ITEM(obj, k) : PyList_GET_ITEM(obj, k);  // borrowed
      if (!add(item, out, depth + 1, Place::kItem)) {
        out.where = "[" + std::to_string(k) + "]" + out.where;
        return false;
      }
    }
    out.structure += tuple ? ')' : ']';
    return true;
  } else if (PyDict_CheckExact(obj) && depth < kMaxDepth) {
    out.nodes.push_back(obj);
    out.structure += '{';
    Py_ssize_t pos = 0;
    PyObject *key, *value;  // borrowed
    for (bool first = true; PyDict_Next(obj, &pos, &key, &value); first = false) {
      // Identifier keys, or ints written "#<decimal>" (a layer index: transformers'
      // EncoderDecoderCache.is_updated), so that the structure string stays unambiguous;
      // insertion order, as pytree (and so export) flattens a dict.
      const char* name = nullptr;
      Py_ssize_t len = 0;
      std::string key_text;
      if (identifier_name(key, &name, &len)) {
        key_text.assign(name, static_cast<size_t>(len));
      } else if (PyLong_CheckExact(key)) {
        int overflow = 0;
        const long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) {
          PyErr_Clear();
          out.unsupported = "a dict key that is an int beyond 64 bits is not supported natively";
          return false;
        }
        key_text = "#" + std::to_string(v);
      } else {
        out.unsupported = "a dict whose keys are not all identifier strings or ints is not supported natively";
        return false;
      }
      if (!first) out.structure += ',';
      out.structure += key_text;
      out.structure += '=';
      if (!add(value, out, depth + 1, Place::kItem)) {
        out.where = (key_text[0] == '#' ? "[" + key_text.substr(1) + "]" : "['" + key_text + "']") + out.where;
        return false;
      }
    }
    out.structure += '}';
    return true;
  } else if (int32_t class_id = depth < kMaxDepth ? object_class_id(Py_TYPE(obj)) : -1; class_id >= 0) {
    return add_object(obj, class_id, out, depth);
  } else if (add_constant(obj, out, place)) {
    // `mode="mean"`, `dtype=torch.half`, `{"act": "gelu"}`, `Mode.FAST`: guarded by value; the
    // capture binds an argument itself into the call (compiled.py), export takes the others
    return true;
  } else if (int32_t module_id = depth == 0 ? module_argument_id(obj) : -1; module_id != -1) {
    // A module passed as an argument (`step(model, ids, cache)`): guarded by identity, no leaf;
    // its parameters and buffers are the specialization's state (compiled.py: module arguments).
    if (module_id < 0) {
      PyErr_Clear();
      out.unsupported = std::string(Py_TYPE(obj)->tp_name) + " (a module that takes no weak reference) is not "
                        "supported natively";
      return false;
    }
    out.structure += 'M';
    append_int(out.structure, module_id);
    return true;
  } else if (!out.unsupported.empty()) {
    return false;  // add_constant said why
  } else {
    out.unsupported = std::string(Py_TYPE(obj)->tp_name) + " is not supported natively";
    return false;
  }
  out.leaves.push_back(leaf);
  out.objects.push_back(obj);
  return true;
}

// Autocast as the call runs under it: 0 when it is off, else 1 + the c10::ScalarType it casts to,
// for the CPU and for CUDA. Autocast's keys are excluded by default and enabling it for a device
// un-excludes that device's key (compared with the default rather than assumed, so a torch that
// excludes fewer stays correct). `other` is set when it is on for another device type.
struct AutocastState {
  int cpu = 0, cuda = 0;
  bool other = false;
  bool on() const { return cpu || cuda || other; }
};

AutocastState autocast_state() {
  AutocastState a;
  const c10::DispatchKeySet changed =
      (c10::impl::tls_local_dispatch_key_set().excluded_ ^ c10::default_excluded_set) & c10::autocast_dispatch_keyset;
  for (c10::DispatchKey k : changed) {
    if (k == c10::DispatchKey::AutocastCPU)
      a.cpu = 1 + static_cast<int>(at::autocast::get_autocast_dtype(c10::DeviceType::CPU));
    else if (k == c10::DispatchKey::AutocastCUDA)
      a.cuda = 1 + static_cast<int>(at::autocast::get_autocast_dtype(c10::DeviceType::CUDA));
    else
      a.other = true;
  }
  return a;
}

// Global settings a trace can bake in, as a suffix of the structure string, so a specialization
// serves only calls made under the settings it was compiled under: the default dtype (factories
// without a dtype), deterministic algorithms (which turn the kept buffers off and make ATen
// fill new memory) and torch.autocast (a capture traced under it holds its casts as ops of its
// own, so its program runs with autocast's keys excluded: scm_call.cpp, run_spec). Settings read
// as the program runs need no guard: ATen's calls see float32 matmul precision, allow_tf32 and the
// SDP flags of ops not decomposed as eager's do, and a cuBLASLt site hands itself back to ATen when
// cuBLAS's reduced-precision flags change (lt_gemm.h). At the defaults the suffix is empty; its
// characters are none of the leaf codes. A few ns a call (reading float32MatmulPrecision() alone
// would cost 45).
void append_global_state(std::string& structure, const AutocastState& autocast) {
  const int dtype = static_cast<int>(c10::typeMetaToScalarType(c10::get_default_dtype()));
  const at::Context& ctx = at::globalContext();
  const int det = ctx.deterministicAlgorithms() ? 1 + ctx.deterministicFillUninitializedMemory() : 0;
  if (dtype == static_cast<int>(c10::ScalarType::Float) && det == 0 && !autocast.on()) return;
  char buf[48];
  if (autocast.on())
    std::snprintf(buf, sizeof buf, "@%d.%d.%d.%d", dtype, det, autocast.cpu, autocast.cuda);
  else
    std::snprintf(buf, sizeof buf, "@%d.%d", dtype, det);
  structure += buf;
}

}  // namespace

trd_call make_call(const FlatArgs& flat) {
  trd_call c;
  c.leaves = flat.leaves.data();
  c.nleaves = static_cast<int32_t>(flat.leaves.size());
  c.grad_mode = at::GradMode::is_enabled() ? 1 : 0;
  c.structure = flat.structure.data();
  c.structure_len = static_cast<int32_t>(flat.structure.size());
  c.after = -1;
  c.tables = nullptr;  // the module's, set by LoadedModule::select
  return c;
}

bool fill_tensor_leaf(const at::Tensor& t, trd_leaf& leaf) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  int64_t dim = impl->dim();
  // A nested tensor may report the strided layout but has no sizes to read.
  if (dim > TRD_MAX_DIM || impl->layout() != c10::kStrided || impl->is_nested()) return false;
  leaf.kind = TRD_TENSOR;
  leaf.dtype = static_cast<int32_t>(c10::typeMetaToScalarType(impl->dtype()));
  leaf.device_type = static_cast<int32_t>(impl->device_type());
  leaf.device_index = impl->device_type() == c10::DeviceType::CPU ? -1 : impl->device().index();
  leaf.dim = static_cast<int32_t>(dim);
  leaf.flags = impl->requires_grad() ? TRD_REQUIRES_GRAD : 0;
  leaf.keyset = impl->key_set().raw_repr();
  auto sizes = impl->sizes();
  auto strides = impl->strides();
  for (int64_t d = 0; d < dim; ++d) {
    leaf.sizes[d] = sizes[d];
    leaf.strides[d] = strides[d];
  }
  leaf.storage_offset = impl->storage_offset();
  leaf.data_ptr = reinterpret_cast<uint64_t>(impl->has_storage() ? impl->data() : nullptr);
  return true;
}

bool flatten_args(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, FlatArgs& out) {
  // Under torch.autocast a specialization traced under the same autocast serves the call (the
  // settings suffix says which); autocast for a device other than the CPU and CUDA is not compiled for.
  const AutocastState autocast = autocast_state();
  if (autocast.other) {
    out.unsupported = "torch.autocast is enabled for a device other than the CPU and CUDA, which trident does not "
                      "compile for";
    return false;
  }
  out.autocast = autocast.on();
  // A TorchFunctionMode (torch.set_default_device, `with torch.device(...)`, a user's mode) would
  // see every torch call of an eager run; a native run bypasses Python, so such calls run eagerly.
  if (at::impl::PythonTorchFunctionTLS::stack_len() > 0) {
    out.unsupported = "a TorchFunctionMode is active (torch.set_default_device, `with torch.device(...)` or "
                      "a mode of your own), which trident does not compile for";
    return false;
  }
  // Room for as much as this thread's last call needed: a 36-layer cache is 180 leaves and a
  // 5 kB structure, which grown by doubling cost a tenth of the flattening in copies. Only sizes
  // are kept, so a nested call (a compiled function called from inside another's Python) is safe.
  thread_local size_t last_leaves = 0, last_nodes = 0, last_structure = 0;
  out.leaves.reserve(last_leaves);
  out.tensors.reserve(last_leaves);
  out.objects.reserve(last_leaves);
  out.nodes.reserve(last_nodes);
  out.structure.reserve(last_structure);
  for (Py_ssize_t k = 0; k < nargs; ++k)
    if (!add(args[k], out, 0, Place::kArgument)) {
      out.unsupported = "argument " + std::to_string(k) + out.where + ": " + out.unsupported;
      return false;
    }
  if (kwnames) {
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);  // borrowed
      // Only identifiers: the structure string must stay unambiguous (no ';' or '=' in names).
      const char* name = nullptr;
      Py_ssize_t len = 0;
      if (!identifier_name(key, &name, &len)) {
        out.unsupported = "a keyword argument whose name is not an identifier is not supported natively";
        return false;
      }
      out.structure += ';';
      out.structure.append(name, static_cast<size_t>(len));
      out.structure += '=';
      if (!add(args[nargs + k], out, 0, Place::kArgument)) {
        out.unsupported = "argument '" + std::string(name, static_cast<size_t>(len)) + "'" + out.where + ": " +
                          out.unsupported;
        return false;
      }
    }
  }
  append_global_state(out.structure, autocast);
  last_leaves = out.leaves.size();
  last_nodes = out.nodes.size();
  last_structure = out.structure.size();
  return true;
}

}  // namespace trident::bindings
