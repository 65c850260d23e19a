"""User generators that split like the built-in ones: the SciDB contract ``(start, n) -> records``.

- Python: ``gen://PKG.MODULE:FUNCTION?n=N&start=S[&layout=NAME]``, or from Python
  ``loader.generator(fn, n=N, start=S, layout=...)``: ``fn(start, n)`` returns a numpy
  structured array of exactly the ``n`` records ``start .. start+n-1``. A module-level
  function of an importable module goes to the workers by name: they import the module
  (sys.path, $PYTHONPATH, and the working directory the source was given in). Any other
  function given to ``loader.generator`` - one defined in the program being run
  (``__main__``: a script, guarded or not, ``python -c``, stdin, IPython, Jupyter), a lambda,
  a closure - goes by value: cloudpickle's bytes of it and of the globals it uses travel in
  the source (``code``; the source itself stays picklable by the standard pickle, for the
  pool and for Dask), and each worker rebuilds it once (``by_value``) without importing or
  running the caller's ``__main__`` (infra/mainless.py). Its URI names it
  (``gen://__main__:fn?n=...``). The layout is ``layout=``, else the dataset's, else the
  dtype of its records (one probe call, memory.py's inference).
- C: ``gen://c:PATH:SYMBOL?n=N&start=S&layout=NAME``: the shared library PATH has
  ``int SYMBOL(void *buf, uint64_t start, uint64_t n)``, which writes records
  start..start+n-1 of the layout into ``buf`` - the batch's own buffer, in place, with the
  GIL released - and returns 0 (generators/examples/scidb96_gen.c is one).

Each worker calls the generator for its own batches' record ranges (``fill``), so the
dataset is byte-identical however the range is split (workers, shards, batch size), as for
``gen://scidb96``. The fingerprint is the URI plus a hash of the code: the module's file
(for a function sent by value: the main script's file, when there is one, and the
function's code - ``function_hash``), or the library; so a re-run of the same generator is
"already loaded" or resumes, and a changed one is a new run.

Errors: a module, function, library or symbol that cannot be found, or a function that
cloudpickle cannot send (it holds a lock, a connection), is a UsageError when the source is
made (exit 2, nothing started); a generator that raises (any exception,
``sys.exit`` and other BaseExceptions too; a KeyboardInterrupt is a stop), returns
non-zero, or returns other than the records asked for (count, dtype) is a GeneratorError
naming it and the record range (exit 1; nothing of the run is committed).

The user's code never runs in the coordinator's process: a run of a user generator always
uses the pool (loading/execute.py), and the one-record probe call (layout check or
inference) runs in a pool worker of its own. A generator that ends its process (os._exit,
a segfault, abort) is then a worker's death that names the generator and the record range
(pool.running): exit 1, nothing of the run committed, the dataset at its last commit.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
import types
from dataclasses import dataclass

import numpy as np
import xxhash

from ..errors import BulkloadError, GeneratorError, LayoutError, UsageError, WorkerError
from ..infra import pool, proc
from ..infra.uri import query_options
from ..model.layouts import Layout, dtype_mismatch, get_layout
from .base import Source, SourcePlan
from .generated import parse_range
from .memory import layout_of, type_name

NOTHING = "nothing from this run was committed"
#: the names of the running program's main module (a script, ``python -c``, stdin, a notebook)
MAIN_MODULES = ("__main__", "__mp_main__")


@dataclass(frozen=True)
class PyGenSource(Source):
    """``fn(start, n)`` of ``module``, by name: records start..start+n-1 (module docstring)."""

    runs_user_code = True

    module: str
    function: str  # its qualified name in the module
    n: int
    start: int = 0
    layout: str | None = None  # a layout name or .toml path (None: the dataset's, or inferred)
    search_dir: str = ""  # where the module may also be (the working directory when given)
    code: bytes | None = None  # the function by value (cloudpickle), or None: by name (module docstring)
    code_hash: str = ""  # a by-value function's code hash (function_hash), taken where it was defined

    @property
    def uri(self) -> str:
        return f"gen://{self.module}:{self.function}?n={self.n}&start={self.start}" + (
            f"&layout={self.layout}" if self.layout else ""
        )

    @property
    def layout_name(self) -> str | None:
        return self.layout

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> str:
        return f"{self.uri};code={self.code_hash or module_hash(self.module)}"

    def resolve(self):
        """The generator function: rebuilt from ``code`` (by value) or imported by name."""
        if self.code is None:
            return python_function(self.module, self.function, self.search_dir)
        return by_value(self.code, self.uri)

    def inferred_layout(self) -> Layout:
        """The layout of the records of a probe call (one record)."""
        k = min(self.n, 1)
        try:
            return layout_of(self._probe(k, None), "")
        except LayoutError as e:
            raise GeneratorError(
                f"generator {self.uri} for records [{self.start}, {self.start + k}) returned "
                f"records that are no layout's: {e}; {NOTHING}"
            ) from None

    def plan(self, layout: Layout) -> SourcePlan:
        """A probe call (one record) checks the generator against ``layout`` before any write."""
        self._probe(min(self.n, 1), layout.dtype)
        return super().plan(layout)

    def _probe(self, k: int, dtype: np.dtype | None) -> np.ndarray:
        """``_call(start, k, dtype)`` in a worker process of its own: the generator may end
        the process it runs in (sys.exit is caught; os._exit, a crash or abort are not),
        which must not be the coordinator's. Its death is a GeneratorError naming it."""
        try:
            return pool.Pool(_probe_worker, [_Probe(self, k, dtype, os.getpid())]).run()[0]
        except WorkerError as e:
            if isinstance(e.error, BulkloadError):
                raise e.error from None
            raise GeneratorError(f"{e} (its probe call, before the load); {NOTHING}") from None

    def fill(self, records: np.ndarray, offset: int) -> None:
        lo = self.start + offset
        np.copyto(records, self._call(lo, len(records), records.dtype))

    def _call(self, lo: int, k: int, dtype: np.dtype | None) -> np.ndarray:
        """``fn(lo, k)``, checked: k records (of ``dtype``)."""
        fn = self.resolve()
        where = f"generator {self.uri} for records [{lo}, {lo + k})"
        try:
            with pool.running(where):
                out = fn(lo, k)
        except (BulkloadError, KeyboardInterrupt):
            raise
        except BaseException as e:
            raise GeneratorError(f"{where} raised {type(e).__name__}: {e}; {NOTHING}") from None
        if not isinstance(out, np.ndarray) or out.shape != (k,):
            got = (
                f"an array of shape {out.shape}" if isinstance(out, np.ndarray) else f"a value of type {type_name(out)}"
            )
            raise GeneratorError(
                f"{where} returned {got}; it must return a 1-D numpy structured array of {k} records; {NOTHING}"
            )
        why = None if dtype is None else dtype_mismatch(out.dtype, dtype)
        if why is not None:
            raise GeneratorError(f"{where} returned records of another layout: {why}; {NOTHING}")
        return out


@dataclass(frozen=True)
class CGenSource(Source):
    """``int SYMBOL(void *buf, uint64_t start, uint64_t n)`` of the shared library ``path``."""

    runs_user_code = True

    path: str  # absolute
    symbol: str
    n: int
    start: int
    layout: str

    @property
    def uri(self) -> str:
        return f"gen://c:{self.path}:{self.symbol}?n={self.n}&start={self.start}&layout={self.layout}"

    @property
    def layout_name(self) -> str:
        return self.layout

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> str:
        return f"{self.uri};code={_file_hash(self.path)}"

    def fill(self, records: np.ndarray, offset: int) -> None:
        lo, k = self.start + offset, len(records)
        out = records if records.flags.c_contiguous else np.empty_like(records)
        with pool.running(f"generator {self.uri} for records [{lo}, {lo + k})"):
            rc = c_function(self.path, self.symbol)(out.ctypes.data, lo, k)
        if rc != 0:
            raise GeneratorError(f"generator {self.uri} returned {rc} (not 0) for records [{lo}, {lo + k}); {NOTHING}")
        if out is not records:
            records[...] = out


@dataclass(frozen=True)
class _Probe:
    """A probe call (`PyGenSource._probe`) as a pool task (proc.start_worker's fields)."""

    source: PyGenSource
    k: int
    dtype: np.dtype | None
    main_pid: int
    worker: int = 0
    fault: str = ""


def _probe_worker(task: _Probe, outbox) -> np.ndarray:
    proc.start_worker(task)
    src = task.source
    return src._call(src.start, task.k, task.dtype)


# --- parsing and resolving ------------------------------------------------------------------


def parse_user_generator(ref: str, layout: Layout | None) -> Source:
    """``gen://c:PATH:SYMBOL?...`` or ``gen://PKG.MODULE:FUNCTION?...`` (the name has a colon)."""
    name, _, query = ref[len("gen://") :].partition("?")
    q = query_options(query, f"source {ref!r}", "parameter")
    unknown = set(q) - {"n", "start", "layout"}
    if unknown:
        raise UsageError(
            f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
            "a user generator takes n, start and layout"
        )
    in_uri = q.get("layout")
    if in_uri and layout is not None and get_layout(in_uri).name != layout.name:
        raise UsageError(f"source {ref!r} generates layout {in_uri!r} but --layout is {layout.name!r}")
    given = in_uri or (layout.name if layout is not None else None)  # (--layout itself is used first)
    if name.startswith("c:"):
        path, _, symbol = name[2:].rpartition(":")
        n, start = parse_range(ref, q, "gen://c:./libgen.so:fill?n=1000&layout=scidb96")
        if not given:
            raise UsageError(f"source {ref!r} needs layout=NAME: the layout of the records {symbol or 'SYMBOL'} writes")
        if in_uri:
            get_layout(in_uri)  # an unknown layout: refused now
        src = CGenSource(os.path.abspath(path), symbol, n, start, given)
        c_function(src.path, src.symbol)  # a missing library or symbol: refused now
        return src
    module, _, function = name.partition(":")
    n, start = parse_range(ref, q, "gen://mypackage.records:generate?n=1000")
    pysrc = PyGenSource(module, function, n, start, given, os.getcwd())
    python_function(pysrc.module, pysrc.function, pysrc.search_dir)  # a missing module or function: refused now
    return pysrc


def generator(fn, n: int, start: int = 0, layout: str | Layout | None = None) -> PyGenSource:
    """The source of ``fn(start, n)`` for ``loader.load``: records start..start+n-1.

    A module-level function of an importable module is called by name in the workers; any
    other function (defined in the program being run - a script, ``python -c``, stdin, a
    notebook - a lambda, a closure) is sent by value with cloudpickle, with the globals it
    uses (module docstring). ``layout``: a layout name, .toml path or Layout (None: the
    dataset's, or the dtype of ``fn``'s records)."""
    module = getattr(fn, "__module__", None) or "__main__"
    function = getattr(fn, "__qualname__", None) or type(fn).__name__
    ref = f"{module}:{function}"
    if not callable(fn):
        raise UsageError(f"generator {ref}: a value of type {type_name(fn)} is not a function; give fn(start, n)")
    lay = layout.name if isinstance(layout, Layout) else layout
    n, start = parse_range(ref, {"n": str(n), "start": str(start)}, "loader.generator(fn, n=1000)")
    if _by_name(fn, module, function):
        return PyGenSource(module, function, n, start, lay, os.getcwd())
    import cloudpickle  # only a function sent by value needs it

    try:
        code = cloudpickle.dumps(fn)
    except Exception as e:
        raise UsageError(
            f"generator {ref}: cannot be sent to the workers ({type(e).__name__}: {e}); it may use "
            "only what can be pickled (no open files, locks or connections): open them inside "
            "the function"
        ) from None
    return PyGenSource(module, function, n, start, lay, os.getcwd(), code, f"{module_hash(module)}+{function_hash(fn)}")


def _by_name(fn, module: str, function: str) -> bool:
    """Whether the workers can import ``fn`` as ``module:function`` (no need to send it)."""
    if module in MAIN_MODULES or "<" in function:
        return False
    try:
        return python_function(module, function, "") is fn
    except UsageError:
        return False


@functools.cache
def by_value(code: bytes, uri: str):
    """The function of cloudpickle's ``code`` (once per process). Rebuilding it imports the
    modules it uses by name, never the caller's ``__main__`` (its globals come with it)."""
    import cloudpickle

    try:
        return cloudpickle.loads(code)
    except Exception as e:
        raise GeneratorError(
            f"generator {uri} cannot be rebuilt in this worker ({type(e).__name__}: {e}); "
            f"the modules it uses must be importable there too; {NOTHING}"
        ) from None


@functools.cache
def python_function(module: str, function: str, search_dir: str):
    """The function ``module:function``, imported (``search_dir`` appended to sys.path).
    Never one of the running program's ``__main__`` (``gen://__main__:fn`` from the CLI):
    the workers never import it (infra/mainless.py); ``generator(fn)`` sends such a
    function by value."""
    if module in MAIN_MODULES:
        raise UsageError(
            f"generator {module}:{function}: {module} is the program being run, which the workers "
            "never import; give the function itself, loader.generator(fn, n=...), which sends it "
            "by value, or name a function of a module"
        )
    if search_dir and search_dir not in sys.path:
        sys.path.append(search_dir)
    try:
        obj: object = importlib.import_module(module)
    except (Exception, SystemExit) as e:
        raise UsageError(
            f"generator {module}:{function}: cannot import module {module!r} ({type(e).__name__}: "
            f"{e}); it must be importable from the working directory or PYTHONPATH"
        ) from None
    for part in function.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"generator {module}:{function}: module {module!r} has no {function!r}")
    if not callable(obj):
        raise UsageError(f"generator {module}:{function}: {function!r} is of type {type_name(obj)}, not a function")
    return obj


@functools.cache
def c_function(path: str, symbol: str):
    """``int symbol(void *, uint64_t, uint64_t)`` of the shared library at ``path``."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise UsageError(
            f"generator gen://c:{path}:{symbol}: cannot load the library ({e}); give the path of "
            "a shared library (.so) built with -shared -fPIC"
        ) from None
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        raise UsageError(
            f"generator gen://c:{path}:{symbol}: the library has no symbol {symbol!r} "
            "(check the name and that it is not static)"
        ) from None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
    fn.restype = ctypes.c_int
    return fn


def module_hash(module: str) -> str:
    """xxh3 of the file of the loaded module ``module`` ("-": it has none: ``python -c``,
    stdin, a notebook)."""
    return _file_hash(getattr(sys.modules.get(module), "__file__", None))


#: values whose repr is the same in every run (so are tuples and frozensets of them)
PLAIN = (int, float, complex, str, bytes, bool, type(None), type(Ellipsis))


def function_hash(fn) -> str:
    """xxh3 of what ``fn`` computes, the same in every run of the same program: its code
    (bytecode, names, constants, nested code, recursively), defaults, closure values, the
    plain global values it reads and the code of the functions of its own module it calls.
    Other objects count by their type only (their repr may hold an address)."""
    h = xxhash.xxh3_64()
    seen: set[int] = set()

    def feed(obj) -> None:
        if isinstance(obj, PLAIN):
            h.update(f"{type(obj).__name__}:{obj!r};".encode())
        elif isinstance(obj, (tuple, list)):
            h.update(b"(")
            for x in obj:
                feed(x)
            h.update(b")")
        elif isinstance(obj, frozenset):  # its order differs between runs (string hashing)
            h.update(repr(sorted(repr(x) for x in obj)).encode())
        elif isinstance(obj, types.CodeType):
            h.update(obj.co_code)
            feed(obj.co_names)
            feed(obj.co_consts)
        elif isinstance(obj, functools.partial):
            feed((obj.func, obj.args, tuple(sorted(obj.keywords.items()))))
        elif isinstance(obj, (types.FunctionType, types.MethodType)) and id(obj) not in seen:
            seen.add(id(obj))
            f = obj.__func__ if isinstance(obj, types.MethodType) else obj
            feed((f.__code__, f.__defaults__, tuple(sorted((f.__kwdefaults__ or {}).items()))))
            feed(tuple(_cell_value(c) for c in f.__closure__ or ()))
            g = f.__globals__
            for name in f.__code__.co_names:
                v = g.get(name)
                if isinstance(v, (*PLAIN, tuple, frozenset)) or (
                    isinstance(v, types.FunctionType) and v.__module__ == f.__module__
                ):
                    feed((name, v))
        else:
            h.update(type(obj).__qualname__.encode())
            call = getattr(type(obj), "__call__", None)  # noqa: B004 - the class's own __call__, not callable()
            if isinstance(call, types.FunctionType):
                feed(call)

    feed(fn)
    return h.hexdigest()


def _cell_value(cell):
    """A closure cell's value (None: still empty)."""
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _file_hash(path: str | None) -> str:
    """xxh3 of a file's bytes ("-": none)."""
    if not path or not os.path.isfile(path):
        return "-"
    with open(path, "rb") as f:
        return xxhash.xxh3_64_hexdigest(f.read())
