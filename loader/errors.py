"""The one exception hierarchy of bulkload.

Every error says what happened, where, and what to do. Each class subclasses the
matching builtin so that Python callers can catch it naturally, and carries the
exit code the CLI turns it into:

  0 done, 1 failed (bad data, verify mismatch, worker failure), 2 usage
  (bad arguments, unknown layout/scheme, unwritable path), 3 dataset busy,
  128 + N stopped by signal N (130 SIGINT, 129 SIGHUP, 143 SIGTERM; `Interrupted`).

Errors that stop a run carry an ``outcome``: set by the run that caught them (only it
knows what it committed), e.g. "3 of 10 files (30,000 records) were committed"; the
message ends with it.
"""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BUSY = 3


class BulkloadError(Exception):
    """Base class. `exit_code` is what the CLI exits with.

    Picklable whatever a subclass's ``__init__`` takes (a worker process sends the error
    object itself to the coordinator): rebuilt from its args and attributes, not by
    calling ``__init__`` again."""

    exit_code = EXIT_FAILED

    def __reduce__(self):
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls, args: tuple, state: dict) -> BulkloadError:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


# --- usage errors (exit 2) ---------------------------------------------------


class UsageError(BulkloadError, ValueError):
    """A bad argument or option: fix the command line."""

    exit_code = EXIT_USAGE


class UnknownLayoutError(UsageError, KeyError):
    def __str__(self) -> str:  # KeyError would repr() the message
        return self.args[0] if self.args else ""


class LayoutError(UsageError):
    """A layout declaration is malformed."""


class UnknownSchemeError(UsageError):
    pass


class DatasetMismatchError(UsageError):
    """The dataset exists with another layout, format or shard count."""


class DatasetMovedError(UsageError):
    """The dataset directory was moved, renamed or removed while a job was using it."""


class PipelineError(UsageError):
    """A pipeline file (pipelines/NAME.toml) is malformed or has an unknown key."""


class NotWritableError(BulkloadError, PermissionError):
    exit_code = EXIT_USAGE


class MissingPathError(BulkloadError, FileNotFoundError):
    exit_code = EXIT_USAGE


class NotReadableError(BulkloadError, PermissionError):
    """A dataset file or directory this user may not read: fix permissions (not damage)."""

    exit_code = EXIT_USAGE


class DatasetNotFoundError(MissingPathError):
    pass


class NestedDatasetError(UsageError):
    """A dataset path inside another dataset (whose compaction or --replace would delete it)."""


class OutputInDatasetError(UsageError):
    """An output path (--out, a temporary file beside it, a pipeline's out) resolves into a
    dataset directory or a --replace build: writing it would destroy the dataset."""


class SourceTypeError(UsageError):
    """SOURCE is a device, a socket or a procfs/sysfs file: not a file of records."""


class EnvironmentVariableError(UsageError):
    """A BULKLOAD_* environment variable holds a value that cannot be used."""


# --- failures (exit 1) ---------------------------------------------------------


class InputError(BulkloadError, ValueError):
    """The input data is malformed (e.g. a partial trailing record)."""

    exit_code = EXIT_FAILED


class KeyOrderError(InputError):
    """put_sorted received keys that are not strictly ascending."""


class PartialRecordError(InputError):
    def __init__(
        self,
        source: str,
        offset: int,
        record_size: int,
        tail: int,
        fix: str = "truncate or complete the file and retry",
    ):
        super().__init__(
            f"{source}: partial record at byte offset {offset} "
            f"({tail} trailing bytes, records are {record_size} bytes); "
            f"nothing from this source was committed - {fix}"
        )
        self.source = source
        self.offset = offset


class ConversionError(InputError):
    """A column (of a DataFrame or Arrow table in memory, or of an .npy, Arrow or Parquet
    file) cannot become a layout field as it is: it holds nulls, or converting it would
    change a value (model/conversions.py)."""


class GeneratorError(InputError):
    """A user generator (gen://MODULE:FUNCTION, gen://c:LIB:SYMBOL, an iterable given to
    load) raised, returned an error code, or returned records that are not the ones asked
    for (wrong count or dtype); the message names the generator and the record range."""


class DuplicateCellError(InputError):
    """Two records set the same cell of a 2-D array under --duplicates error."""


class SourceVanishedError(InputError):
    """A source file disappeared (or shrank) while it was being read."""


class UnreadableInputError(InputError):
    """A source file cannot be read (permissions, I/O error)."""


class FileFormatError(InputError):
    """A source file of a typed format (.npy, Arrow IPC, Parquet) is malformed or truncated."""


class NullValuesError(InputError):
    """A column of a source file holds nulls: a record has a value in every field."""


class ChangedInputError(InputError):
    """A file that was already ingested has changed (same name, other size or content)."""


class BadFileError(InputError):
    """An input file of a directory source is unusable; ``errors`` lists the bad files
    (`loader.docs.json_dir.FileError`: path and reason)."""

    def __init__(self, message: str, errors=()):
        super().__init__(message)
        self.errors = list(errors)


class DuplicateIdError(InputError):
    """A document id occurs twice in one load, or is already stored in the dataset."""


class DatasetReplacedError(BulkloadError):
    """The dataset was replaced (--replace) after this reader opened it: open it again."""

    exit_code = EXIT_FAILED


class SnapshotExpiredError(DatasetReplacedError):
    """Data of this reader's snapshot was removed by a later compact / finalize (only
    possible for a reader that could not pin its snapshot): open the dataset again.
    A DatasetReplacedError, so that one ``except`` handles every "open it again"."""


class VerifyError(BulkloadError):
    """Stored data does not match its manifest."""

    exit_code = EXIT_FAILED


class CorruptBatchError(VerifyError):
    """A batch read back does not have the checksum its manifest row stores."""


class ManifestError(BulkloadError, ValueError):
    """``manifest.json`` is not a valid bulkload manifest (bad JSON, missing keys, wrong
    types, batch rows that cannot be); nothing is read or written on its word."""

    exit_code = EXIT_FAILED


class DamagedDatasetError(ManifestError):
    """A dataset directory that holds bulkload data (shards, arrays) but no readable
    metadata (manifest.json deleted, a dangling link, a FIFO, a device, a directory), or a
    file inside a dataset that is not a regular file of plausible size: nothing reads or
    writes over it; the message says how to recover."""

    #: set by infra/regular.py: the file and what is wrong with it, for a caller's own message
    what: str


class NewerFormatError(ManifestError):
    """The dataset was written by a newer bulkload (its manifest.json's ``version`` is
    above the one this code knows): nothing is read or written; the message names both
    versions. Exit 1."""


class WorkerError(BulkloadError, RuntimeError):
    """A worker process failed or died; the pool stopped the others. ``died``: it was
    killed or exited without its result (not an error it raised); ``error``: the
    exception the worker raised (the object itself, sent through its pipe; None when it
    died or its error could not be pickled), with ``worker_traceback`` its text;
    ``outcome``: what the run that used the pool committed (set by that run)."""

    exit_code = EXIT_FAILED
    died = False
    error: BaseException | None = None
    worker_traceback = ""
    outcome = ""

    def raised(self, *types: type) -> BaseException | None:
        """The worker's own error if it is one of ``types``, else None."""
        return self.error if isinstance(self.error, types) else None

    def __str__(self) -> str:
        text = super().__str__()
        return f"{text}; {self.outcome}" if self.outcome else text


class EngineError(BulkloadError, ConnectionError):
    """The execution engine cannot be used (e.g. the Dask scheduler is unreachable)."""

    exit_code = EXIT_FAILED


class StoreError(BulkloadError, OSError):
    """A storage backend failed (disk full, file size limit, corrupt store)."""

    exit_code = EXIT_FAILED


class CorruptStoreError(StoreError):
    """A shard's store files are damaged (truncated, flipped pages, bad SST blocks)."""


class MissingShardError(StoreError):
    """A shard the manifest lists committed batches in is gone (or is not a store)."""


class OutputError(BulkloadError, OSError):
    """An output file (--out) could not be written: disk full, I/O error."""

    #: the path that could not be written (infra/outputs.py `write_error`)
    output: str

    exit_code = EXIT_FAILED


class NoSpaceError(BulkloadError, OSError):
    """A load cannot fit on the dataset's filesystem (checked before anything is written)."""

    exit_code = EXIT_FAILED


class NotFoundError(BulkloadError, KeyError):
    def __str__(self) -> str:
        return self.args[0] if self.args else ""


class Interrupted(KeyboardInterrupt):
    """The job was stopped by signal ``signo``: SIGINT (Ctrl-C) or, under the CLI, SIGTERM
    or SIGHUP (see interrupts.py). A KeyboardInterrupt, so that whatever cleans up on
    Ctrl-C does so for every stop signal; exit code 128 + signo."""

    def __init__(self, signo: int = signal.SIGINT, outcome: str = ""):
        super().__init__(signo)
        self.signo = int(signo)
        self.outcome = outcome

    @property
    def exit_code(self) -> int:
        return 128 + self.signo

    @classmethod
    def of(cls, exc: KeyboardInterrupt) -> Interrupted:
        """``exc`` itself, or a plain KeyboardInterrupt as the SIGINT it came from."""
        return exc if isinstance(exc, cls) else cls(signal.SIGINT)

    def __str__(self) -> str:
        text = f"interrupted by {signal.Signals(self.signo).name}"
        return f"{text}; {self.outcome}" if self.outcome else text


# --- busy (exit 3) ---------------------------------------------------------------


class DatasetBusyError(BulkloadError, BlockingIOError):
    exit_code = EXIT_BUSY
