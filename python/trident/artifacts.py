"""Saved specializations (warm start): what a hit needs, written so that another process installs a
function's specializations without capturing them again.

    trident.save(fast, "step.trd")          # after the calls a deployment serves
    fast = trident.load("step.trd", step)   # a new process: the same specializations, no capture

and automatically: a compiled function writes its specializations to the cache directory after each
one it adds, and its first miss in a new process installs them from there (TRIDENT_ARTIFACTS=0
turns that off).

What is saved: each specialization's host IR as installed, the module state it reads by name
(parameters and buffers: names, dtypes, shapes, devices; never their values), the values of its
constants (tensors the program computed at lowering or the trace lifted), the cubins of its Triton
kernels, and what its object numbers stand for. The IR's process-specific values are placeholders in
the file and this process's values after loading: cubin paths, the addresses of state tensors in
the overlap guards, object numbers (argument classes, returned classes, constant objects).

The file is checked before anything in it is used, and anything wrong is a clean capture again with
one log line (counters: artifact_loads, artifacts_rejected): its SHA-256 (truncated or altered
files), the format version, the versions of trident, torch, Triton, Python and CUDA and the GPU
architecture, the code of the function and of every module class it reaches (their methods'
bytecode), the modules' configuration values, and the state's names, dtypes, shapes and devices.
The format is a JSON header and raw blobs: nothing in it is unpickled or executed, and the native
code of each specialization is generated from the IR by this process (or found in the module
cache under its verified record), never taken from the file."""
from __future__ import annotations

import enum
import hashlib
import importlib
import json
import os
import re
import struct
import sys
import tempfile
import types

import torch

from . import _C, arg_objects, object_table, python_kernels, structure_text
from .lowering import hir

MAGIC = b"TRIDENT-SPECS\n"
MAX_HASHED_ELEMENTS = 1 << 16  # a tensor the code reads outside module state, hashed by value up to this
FORMAT = 1
_CUBIN_PATH = re.compile(r'"([^"\\]*\.cubin)"')
_OBJECT_NUMBER = re.compile(r"\b(pyref|object)\((\d+)\)")
_OVERLAP_GUARD = re.compile(r'guard expr "no_overlap\(([^"]*)\)"')


class ArtifactRejected(Exception):
    """Why a saved file is not used (said once; the function captures as if there were none)."""


# ---- what the file is keyed on -------------------------------------------------------------------

def _versions() -> dict:
    import triton
    from . import __version__
    arch = None
    if torch.cuda.is_available():
        arch = "sm_%d%d" % torch.cuda.get_device_capability()
    # the knobs that change what a lowering emits or how a module runs (config.py), as this process has them
    knobs = sorted([k, v] for k, v in os.environ.items()
                   if k.startswith("TRIDENT_") and k not in ("TRIDENT_CACHE_DIR", "TRIDENT_ARTIFACTS"))
    return {"format": FORMAT, "trident": __version__, "torch": torch.__version__, "triton": triton.__version__,
            "python": sys.version.split()[0], "cuda": torch.version.cuda, "arch": arch, "knobs": knobs,
            "python_kernels": python_kernels.registrations()}


def _plain(v) -> bool:
    return v is None or type(v) in (bool, int, float, str) or (
        type(v) in (tuple, list) and len(v) <= 64 and all(_plain(x) for x in v))


def _const_text(c) -> str:
    if isinstance(c, (frozenset, set)):
        return "{" + ",".join(sorted(_const_text(x) for x in c)) + "}"
    if isinstance(c, tuple):
        return "(" + ",".join(_const_text(x) for x in c) + ")"
    return repr(c)


def code_fingerprint(fn) -> str:
    """SHA-256 over the code a capture of `fn` depends on: fn's bytecode (and that of the helper
    functions of its own Python module it names), every method of each module class it reaches
    (MRO up to nn.Module), those classes' packages' versions, and each module's plain attribute
    values and configuration (`config.to_dict()`): whatever of these changes, the saved programs
    may no longer be the function's."""
    from .compiled import _global_names, _reached_state
    h = hashlib.sha256()
    seen_code: set = set()
    seen_cls: set = set()

    def add_code(code):
        # Field by field, not marshal.dumps: marshal's output depends on reference counts, and the
        # repr of a frozenset constant on string hashing, neither of which repeats across processes.
        if id(code) in seen_code:
            return
        seen_code.add(id(code))
        h.update(code.co_code)
        h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                       code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode())
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                add_code(c)
            else:
                h.update(_const_text(c).encode())

    def add_function(f, depth=0):
        f = getattr(f, "__func__", f)
        code = getattr(f, "__code__", None)
        if code is None or id(code) in seen_code:
            return
        add_code(code)
        g = getattr(f, "__globals__", {})
        values = [(name, g.get(name)) for name in sorted(_global_names(code))]
        for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                values.append((name, cell.cell_contents))
            except ValueError:  # an empty cell
                values.append((name, None))
        for name, v in values:
            h.update(name.encode())
            if isinstance(v, types.FunctionType) and v.__module__ == f.__module__ and depth < 4:
                add_function(v, depth + 1)
            else:
                add_value(v)

    def add_value(v):
        """A value the code reads: what of it a capture may have baked in."""
        if _plain(v):
            h.update(repr(v).encode())
        elif isinstance(v, torch.nn.Module):
            add_module(v)
        elif isinstance(v, torch.Tensor):
            if v.numel() > MAX_HASHED_ELEMENTS:
                raise ArtifactRejected("the function reads a large tensor that is not module state")
            h.update(repr((v.dtype, tuple(v.shape), str(v.device))).encode())
            h.update(v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(v, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)) or callable(v):
            h.update(repr(getattr(v, "__qualname__", getattr(v, "__name__", type(v).__name__))).encode())
        else:
            h.update(repr(type(v)).encode())
            if hasattr(v, "to_dict"):
                try:
                    h.update(json.dumps(v.to_dict(), sort_keys=True, default=repr).encode())
                except (TypeError, ValueError):
                    pass
            for k, x in sorted(getattr(v, "__dict__", {}).items()):
                if _plain(x):
                    h.update(f"{k}={x!r}".encode())

    def add_class(cls):
        for c in cls.__mro__:
            if c in (torch.nn.Module, object) or c in seen_cls:
                continue
            seen_cls.add(c)
            package = sys.modules.get(c.__module__.split(".")[0])
            h.update(f"{c.__module__}.{c.__qualname__} {getattr(package, '__version__', '')}".encode())
            for name, v in sorted(vars(c).items()):
                f = getattr(v, "__func__", v)
                if getattr(f, "__code__", None) is not None:
                    h.update(name.encode())
                    add_code(f.__code__)

    def add_module(m: torch.nn.Module):
        for name, sub in m.named_modules():
            add_class(type(sub))
            h.update(name.encode())
            for k, v in sorted(vars(sub).items()):
                if k.startswith("_"):
                    continue
                if _plain(v):
                    h.update(f"{k}={v!r}".encode())
                elif hasattr(v, "to_dict"):
                    try:
                        h.update(json.dumps(v.to_dict(), sort_keys=True, default=repr).encode())
                    except (TypeError, ValueError):
                        h.update(repr(type(v)).encode())

    if isinstance(fn, torch.nn.Module):
        add_module(fn)
    else:
        add_function(fn)
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            add_module(owner)
        elif isinstance(fn, types.FunctionType):
            for v in _reached_state(fn).values():
                if isinstance(v, torch.nn.Module):
                    add_module(v)
    return h.hexdigest()


def state_signature(refs) -> list:
    """Names, dtypes, shapes, devices and requires_grad of the module state the specs read."""
    return [[r.kind, r.target, str(r.tensor.dtype), list(r.tensor.shape), str(r.tensor.device),
             bool(r.tensor.requires_grad)] for r in refs if r.kind in ("parameter", "buffer")]


def automatic_path(ctl) -> str | None:
    """Where ctl's specializations are kept in the cache directory (None: off, or unkeyable)."""
    if os.environ.get("TRIDENT_ARTIFACTS", "1") == "0":
        return None
    try:
        key = json.dumps([_versions(), ctl.name, code_fingerprint(ctl.fn), _options_key(ctl.options)],
                         sort_keys=True)
    except Exception:  # noqa: BLE001  (a function we cannot fingerprint is simply not kept)
        return None
    return os.path.join(_C.cache_subdir("artifacts"), hashlib.sha256(key.encode()).hexdigest()[:32] + ".trd")


def _options_key(options) -> dict:
    return {"reuse_outputs": options.reuse_outputs, "graphs": options.graphs, "dynamic": options.dynamic}


# ---- writing -------------------------------------------------------------------------------------

def _object_entry(obj) -> dict:
    if isinstance(obj, enum.Enum):
        cls = type(obj)
        return {"enum": cls.__module__, "qualname": cls.__qualname__, "member": obj.name}
    if isinstance(obj, type):
        return {"class": obj.__module__, "qualname": obj.__qualname__}
    if isinstance(obj, torch.device):
        return {"device": str(obj)}
    raise ArtifactRejected(f"the program names a {type(obj).__name__} object, which a file cannot hold")


def _structure_objects(structure: bytes, number) -> bytes:
    """A structure string (flatten.h) with each object number in it, `<N{` and `<N(` a registered
    class's and `c<N>`/`e<N>` a class's or enum member's (process-local: another process numbers its objects
    in another order), replaced by `@obj:J` through number(N, registered). Names and str constants
    are copied as they are (structure_text.pieces), so no user text is read as a code; the settings
    suffix too (numbers that are the same in every process)."""
    out = bytearray()
    for kind, text, n in structure_text.pieces(structure):
        if kind == "object":
            out += text[:1] + b"@obj:%d" % number(n, False)
        elif kind == "class":
            out += b"<@obj:%d" % number(n, True)
        else:
            out += text
    return bytes(out)


# Cubins read in this process: path -> sha256, and sha256 -> bytes. The files are named by their
# contents' hash (lowering/triton_lower.py), so a path read once is read for good.
_CUBIN_DIGESTS: dict[str, str] = {}
_CUBIN_BYTES: dict[str, bytes] = {}


def _placeholders(text: str, state_extents: dict, objects: dict, cubins: set, flattened: set) -> str:
    """The IR with this process's values as placeholders: @cubin:<sha256>, @state:<k>, @obj:<j>.
    Adds the digests of the cubins it names to `cubins`."""
    def cubin(m):
        path = m.group(1)
        digest = _CUBIN_DIGESTS.get(path)
        if digest is None:
            with open(path, "rb") as f:
                data = f.read()
            digest = _CUBIN_DIGESTS[path] = hashlib.sha256(data).hexdigest()
            _CUBIN_BYTES[digest] = data
        cubins.add(digest)
        return f'"@cubin:{digest}"'

    def number(n: int, as_class: bool) -> int:
        try:
            obj = object_table.object_of(n)
        except KeyError:
            raise ArtifactRejected(f"the program names object {n}, which this process did not number") from None
        entry = _object_entry(obj)
        key = json.dumps(entry, sort_keys=True)
        if key not in objects:
            objects[key] = len(objects)
        if as_class:
            flattened.add(objects[key])
        return objects[key]

    text = _CUBIN_PATH.sub(cubin, text)
    text = _OBJECT_NUMBER.sub(lambda m: f"{m.group(1)}(@obj:{number(int(m.group(2)), False)})", text)
    text = structure_text.STRUCTURE_LINE.sub(
        lambda m: m.group(1) + hir.quote(_structure_objects(hir.unquote(m.group(2)), number).decode(
            "utf-8", "surrogatepass")), text)

    def overlap(m):
        items = [s.strip() for s in m.group(1).split(",")]
        for i in range(0, len(items) - 2, 3):
            if items[i] in ("3", "4") and (items[i + 1], items[i + 2]) in state_extents:
                items[i + 1], items[i + 2] = f"@state:{state_extents[(items[i + 1], items[i + 2])]}", "@len"
        return 'guard expr "no_overlap(' + ", ".join(items) + ')"'
    return _OVERLAP_GUARD.sub(overlap, text)


def build(ctl) -> bytes:
    """The file for controller `ctl`'s installed specializations."""
    from .aliasing import _extent
    if not ctl.installed:
        raise ArtifactRejected("no specialization to save yet")
    if getattr(ctl, "_module_arguments", None):
        raise ArtifactRejected("its specializations are for modules passed as arguments, guarded by identity, "
                               "which a file cannot hold")
    extents = {}
    for k, ref in enumerate(ctl.state):
        e = _extent(ref.tensor) if isinstance(ref.tensor, torch.Tensor) else None
        if e is not None:
            extents[(str(e[1]), str(e[2] - e[1]))] = k
    # Each installed spec is rewritten once, not at every save (a module of N specializations would
    # otherwise redo all N at each miss): the object numbering is kept with the texts it numbered.
    memo = ctl.__dict__.setdefault("_artifact_memo", {"objects": {}, "flattened": set(), "texts": {}})
    objects, flattened = memo["objects"], memo["flattened"]
    blobs: list[bytes] = []
    state = []
    for ref in ctl.state:
        entry = {"kind": ref.kind, "target": ref.target}
        if ref.kind == "constant":
            t = ref.tensor.detach()
            data = t.cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            entry.update(dtype=str(t.dtype).replace("torch.", ""), shape=list(t.shape), device=str(t.device),
                         stride=list(t.stride()), blob=len(blobs))
            if not t.is_contiguous():
                raise ArtifactRejected(f"constant {ref.target} is not contiguous")
            blobs.append(data)
        state.append(entry)
    extents_key = tuple(sorted(extents.items()))
    specs, cubins = [], {}
    for s in ctl.installed:
        done = memo["texts"].get(s["text"])
        if done is None or done[0] != extents_key:
            named: set = set()
            done = memo["texts"][s["text"]] = (extents_key, _placeholders(s["text"], extents, objects, named,
                                                                          flattened), named)
        specs.append(dict(s, text=done[1]))
        cubins.update(dict.fromkeys(done[2]))
    if len(memo["texts"]) > len(ctl.installed):  # evicted specs' texts
        live = {s["text"] for s in ctl.installed}
        memo["texts"] = {t: v for t, v in memo["texts"].items() if t in live}
    cubin_index = {}
    for digest in cubins:
        cubin_index[digest] = len(blobs)
        blobs.append(_CUBIN_BYTES[digest])
    header = {"versions": _versions(), "name": ctl.name, "pid": os.getpid(), "code": code_fingerprint(ctl.fn),
              "options": _options_key(ctl.options), "state_signature": state_signature(ctl.state),
              "state": state, "specs": specs, "cubins": cubin_index,
              "objects": [dict(json.loads(k), flattened=i in flattened) for k, i in
                          sorted(objects.items(), key=lambda kv: kv[1])],
              "blobs": [len(b) for b in blobs]}
    head = json.dumps(header).encode()
    body = struct.pack("<Q", len(head)) + head + b"".join(blobs)
    return MAGIC + hashlib.sha256(body).digest() + body


def write(data: bytes, path: str) -> None:
    """Atomically (a temporary file in the same directory, then renamed): a reader sees the old file
    or the new one, never half of one; two writers of the same file leave one of theirs."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".trd-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# ---- reading -------------------------------------------------------------------------------------

def read(path: str, trusted_cache: bool = False) -> tuple[dict, list[bytes]]:
    """The header and blobs of a file, checked for integrity (ArtifactRejected says why not)."""
    if trusted_cache:
        data, why = _C.read_private_file(path)
        if data is None:
            raise ArtifactRejected(why)
    else:
        if os.path.isdir(path):
            raise ArtifactRejected("it is a directory")
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ArtifactRejected(f"unreadable ({e.strerror or e})") from None
    if not data.startswith(MAGIC):
        raise ArtifactRejected("not a trident specializations file")
    digest, body = data[len(MAGIC):len(MAGIC) + 32], data[len(MAGIC) + 32:]
    if len(digest) < 32 or hashlib.sha256(body).digest() != digest:
        raise ArtifactRejected("truncated or altered (its SHA-256 does not match)")
    (n,) = struct.unpack_from("<Q", body)
    header = json.loads(body[8:8 + n])
    blobs, at = [], 8 + n
    for size in header["blobs"]:
        blobs.append(body[at:at + size])
        at += size
    return header, blobs


def check(header: dict, ctl) -> None:
    """ArtifactRejected when the file is not this function's, or not for this process's versions."""
    mine = _versions()
    for k, v in header["versions"].items():
        if k == "arch" and v is None:
            continue
        if mine.get(k) != v:
            raise ArtifactRejected(f"saved with {k} {v}, this process has {mine.get(k)}")
    if header["code"] != code_fingerprint(ctl.fn):
        raise ArtifactRejected("the function's code or its modules' classes or configuration changed")
    if header["options"] != _options_key(ctl.options):
        raise ArtifactRejected(f"saved with options {header['options']}, compiled with {_options_key(ctl.options)}")


def _resolve_object(entry: dict):
    if "device" in entry:
        return torch.device(entry["device"])
    if "enum" in entry:
        cls = importlib.import_module(entry["enum"])
        for part in entry["qualname"].split("."):
            cls = getattr(cls, part)
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise ArtifactRejected(f"{entry['enum']}.{entry['qualname']} is no longer an enum")
        return cls[entry["member"]]
    module = importlib.import_module(entry["class"])
    obj = module
    for part in entry["qualname"].split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type):
        raise ArtifactRejected(f"{entry['class']}.{entry['qualname']} is no longer a class")
    return obj


def texts(header: dict, blobs: list[bytes], state) -> list[str]:
    """The specs' IR with this process's values for the placeholders (see _placeholders)."""
    from .aliasing import _extent
    from .lowering.triton_lower import _cubin_path
    numbers = []
    for entry in header["objects"]:
        obj = _resolve_object(entry)
        if entry["flattened"]:
            try:
                numbers.append(arg_objects.register_saved(obj))
            except ValueError as e:
                raise ArtifactRejected(str(e)) from None
        else:
            numbers.append(object_table.intern(obj))
    paths = {d: _cubin_path(blobs[i]) for d, i in header["cubins"].items()}
    out = []
    for spec in header["specs"]:
        t = spec["text"]
        t = re.sub(r'"@cubin:([0-9a-f]{64})"', lambda m: json.dumps(paths[m.group(1)]), t)
        t = re.sub(r"@obj:(\d+)", lambda m: str(numbers[int(m.group(1))]), t)

        def extent(m):
            e = _extent(state[int(m.group(1))].tensor)
            return f"{e[1]}, {e[2] - e[1]}"
        t = re.sub(r"@state:(\d+), @len", extent, t)
        out.append(t)
    return out


def constant(entry: dict, blob: bytes) -> torch.Tensor:
    dtype = getattr(torch, entry["dtype"])
    if not blob:
        return torch.empty(entry["shape"], dtype=dtype, device=entry["device"])
    t = torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(dtype).reshape(entry["shape"])
    return t.to(entry["device"])
