"""User generators that split like the built-in ones: the SciDB contract ``(start, n) -> records``.

- Python: ``gen://PKG.MODULE:FUNCTION?n=N&start=S[&layout=NAME]``, or from Python
  ``loader.generator(fn, n=N, start=S, layout=...)``: ``fn(start, n)`` returns a numpy
  structured array of exactly the ``n`` records ``start .. start+n-1``. The workers import
  the module by name (sys.path, $PYTHONPATH, and the working directory the source was
  given in); its layout is ``layout=``, else the dataset's, else the dtype of its records
  (one probe call in the coordinator, memory.py's inference).
- C: ``gen://c:PATH:SYMBOL?n=N&start=S&layout=NAME``: the shared library PATH has
  ``int SYMBOL(void *buf, uint64_t start, uint64_t n)``, which writes records
  start..start+n-1 of the layout into ``buf`` - the batch's own buffer, in place, with the
  GIL released - and returns 0 (generators/examples/scidb96_gen.c is one).

Each worker calls the generator for its own batches' record ranges (``fill``), so the
dataset is byte-identical however the range is split (workers, shards, batch size), as for
``gen://scidb96``. The fingerprint is the URI plus a hash of the code (the module's file /
the library), so a re-run of the same generator is "already loaded" or resumes, and a
changed one is a new run.

Errors: a module, function, library or symbol that cannot be found is a UsageError when
the source is parsed (exit 2, nothing started); a generator that raises (any exception,
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

    @property
    def uri(self) -> str:
        return f"gen://{self.module}:{self.function}?n={self.n}&start={self.start}" + \
            (f"&layout={self.layout}" if self.layout else "")

    @property
    def layout_name(self) -> str | None:
        return self.layout

    def count(self, layout: Layout) -> int:
        return self.n

    def fingerprint(self, layout: Layout) -> str:
        mod = sys.modules.get(self.module)
        return f"{self.uri};code={_file_hash(getattr(mod, '__file__', None))}"

    def inferred_layout(self) -> Layout:
        """The layout of the records of a probe call (one record)."""
        k = min(self.n, 1)
        try:
            return layout_of(self._probe(k, None), "")
        except LayoutError as e:
            raise GeneratorError(f"generator {self.uri} for records [{self.start}, {self.start + k}) returned "
                                 f"records that are no layout's: {e}; {NOTHING}") from None

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
        fn = python_function(self.module, self.function, self.search_dir)
        where = f"generator {self.uri} for records [{lo}, {lo + k})"
        try:
            with pool.running(where):
                out = fn(lo, k)
        except (BulkloadError, KeyboardInterrupt):
            raise
        except BaseException as e:  # noqa: BLE001 - the user's function (sys.exit too): its message, where
            raise GeneratorError(f"{where} raised {type(e).__name__}: {e}; {NOTHING}") from None
        if not isinstance(out, np.ndarray) or out.shape != (k,):
            got = (f"an array of shape {out.shape}" if isinstance(out, np.ndarray)
                   else f"a value of type {type_name(out)}")
            raise GeneratorError(f"{where} returned {got}; it must return a 1-D numpy structured array of "
                                 f"{k} records; {NOTHING}")
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
            raise GeneratorError(f"generator {self.uri} returned {rc} (not 0) for records [{lo}, {lo + k}); "
                                 f"{NOTHING}")
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
    name, _, query = ref[len("gen://"):].partition("?")
    q = query_options(query, f"source {ref!r}", "parameter")
    unknown = set(q) - {"n", "start", "layout"}
    if unknown:
        raise UsageError(f"source {ref!r}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                         "a user generator takes n, start and layout")
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
    src = PyGenSource(module, function, n, start, given, os.getcwd())
    python_function(src.module, src.function, src.search_dir)  # a missing module or function: refused now
    return src


def generator(fn, n: int, start: int = 0, layout: str | Layout | None = None) -> PyGenSource:
    """The source of ``fn(start, n)`` for ``loader.load``: records start..start+n-1.

    ``fn`` must be a module-level function the workers can import by name (its module and
    qualified name): not a lambda, a nested function, or one defined in the program being
    run (``__main__``: a script, ``python -c``, stdin, an interactive session). ``layout``: a layout name, .toml path or Layout (None: the dataset's, or
    the dtype of ``fn``'s records)."""
    module, function = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    ref = f"{module}.{function}"
    if not callable(fn) or module is None or "<" in function:
        raise UsageError(f"generator {ref}: the workers call it by name, so it must be a module-level function "
                         "(not a lambda or a nested function); define it in a module")
    if python_function(module, function, "") is not fn:
        raise UsageError(f"generator {ref}: {module}.{function} is not this function; the workers call it by name")
    lay = layout.name if isinstance(layout, Layout) else layout
    n, start = parse_range(ref, {"n": str(n), "start": str(start)}, "loader.generator(fn, n=1000)")
    return PyGenSource(module, function, n, start, lay, os.getcwd())


@functools.lru_cache(maxsize=None)
def python_function(module: str, function: str, search_dir: str):
    """The function ``module:function``, imported (``search_dir`` appended to sys.path).
    Never one of the running program's ``__main__``: the workers would have to run the
    caller's script (or session) again to import it (infra/mainless.py)."""
    if module in MAIN_MODULES:
        raise UsageError(f"generator {module}:{function} is defined in the program being run ({module}), which "
                         "the workers cannot import without running it again; move the function into a module "
                         "(a .py file beside the script) and import it from there")
    if search_dir and search_dir not in sys.path:
        sys.path.append(search_dir)
    try:
        obj = importlib.import_module(module)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - ModuleNotFoundError, or what the module's code raised
        raise UsageError(f"generator {module}:{function}: cannot import module {module!r} ({type(e).__name__}: "
                         f"{e}); it must be importable from the working directory or PYTHONPATH") from None
    for part in function.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise UsageError(f"generator {module}:{function}: module {module!r} has no {function!r}")
    if not callable(obj):
        raise UsageError(f"generator {module}:{function}: {function!r} is of type {type_name(obj)}, not a function")
    return obj


@functools.lru_cache(maxsize=None)
def c_function(path: str, symbol: str):
    """``int symbol(void *, uint64_t, uint64_t)`` of the shared library at ``path``."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise UsageError(f"generator gen://c:{path}:{symbol}: cannot load the library ({e}); give the path of "
                         "a shared library (.so) built with -shared -fPIC") from None
    try:
        fn = getattr(lib, symbol)
    except AttributeError:
        raise UsageError(f"generator gen://c:{path}:{symbol}: the library has no symbol {symbol!r} "
                         "(check the name and that it is not static)") from None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64]
    fn.restype = ctypes.c_int
    return fn


def _file_hash(path: str | None) -> str:
    """xxh3 of a file's bytes ("-": none)."""
    if not path or not os.path.isfile(path):
        return "-"
    with open(path, "rb") as f:
        return xxhash.xxh3_64_hexdigest(f.read())
