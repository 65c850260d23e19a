"""Several inputs in one run: ``bulkload load a.bin b.bin c.bin DATASET``, a glob, FIFOs.

`parse_sources` turns the SOURCE arguments into one source: a single input is that
input's own source (parse.py); several make a `ManyInputs`, loaded by one run:

- inputs that can be read again (files of raw records, .npy / Arrow / Parquet files,
  ``gen://`` ranges): one segment each of the run's plan, in the order given (record
  numbering follows it), split across the workers like one input; each input is matched
  against the dataset's runs on its own (loading/inputs.py): "already loaded", resumed;
- streams (FIFOs, ``-``): each read by its own feeder thread (loading/feeder.py); not
  replayable: every load of them is a new run and nothing of a failed one is committed.

Raw bytes (files of raw records, streams) have no layout of their own: a run with one
reads it under --layout, the dataset's layout or the default (scidb96), never under the
layout of another input (a .npy beside it), and every input with a layout of its own
must hold that one (`ManyInputs.records_layout`: a LayoutError naming both layouts).

A glob (``'parts/*.bin'``, quoted so that bulkload expands it) is replaced by the files
it matches, in name order (directories and dotfiles left out); one that matches nothing
is an error. Mixing streams with inputs that can be read again, giving one input twice,
or several directories of documents are usage errors.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import xxhash

from ..errors import BulkloadError, LayoutError, MissingPathError, UsageError
from ..model.layouts import DEFAULT_LAYOUT, Layout, get_layout
from .base import Source, SourcePlan, directory_source
from .parse import parse_source

GLOB_CHARS = "*?["


@dataclass(frozen=True)
class ManyInputs(Source):
    """Several inputs loaded by one run, in this order (all replayable, or all streams)."""

    parts: tuple[Source, ...]

    @property
    def replayable(self) -> bool:
        return self.parts[0].replayable

    @property
    def uri(self) -> str:
        """How reports and the run record name the inputs (each is in ``run.inputs``)."""
        uris = [p.uri for p in self.parts]
        return " ".join(uris) if len(uris) <= 3 else f"{uris[0]} ... {uris[-1]} ({len(uris)} inputs)"

    def streams(self) -> tuple[Source, ...]:
        return self.parts

    def records_layout(self, given: Layout | None, dataset: Layout | None) -> Layout | None:
        """The layout every input yields (LayoutError naming the input that differs, its
        layout and the run's). Raw bytes (a file of raw records, a stream) have none of
        their own and never take a sibling input's: in a run with one, the run's layout is
        the one given, else the dataset's, else the default (`DEFAULT_LAYOUT`), and every
        input with a layout of its own must hold its records. Without raw inputs, the first
        input with a layout of its own decides, unless one is given."""
        raw = next((p for p in self.parts if p.raw_bytes), None)
        layout, why = given, "given by --layout"
        if given is None and dataset is not None:
            why = "the dataset's"
        elif given is None and raw is not None:
            layout = get_layout(DEFAULT_LAYOUT)
            why = f"the default, for the raw file {raw.uri}, which has no layout of its own"
        for part in self.parts:
            run = layout or dataset
            try:
                own = part.records_layout(None if part.layout_name else layout, dataset)  # (a generator's own)
            except LayoutError as e:
                if raw is None or run is None:  # (with a raw input the run has a layout)
                    raise
                raise LayoutError(_unlike(part, run, why) + f" ({e})") from None
            if run is not None and own is not None and own.fields != run.fields:
                raise LayoutError(_unlike(part, run, why))
            if layout is None and own is not None:
                layout, why = own, f"that of {part.uri}, the first input"
        return layout

    def plan(self, layout: Layout) -> SourcePlan:
        parts = tuple(p.plan(layout) for p in self.parts)
        totals = [p.total for p in parts if p.total is not None]
        total = sum(totals) if len(totals) == len(parts) else None
        fingerprint = None
        if all(p.fingerprint is not None for p in parts):  # the inputs, in order (a --replace build's identity)
            h = xxhash.xxh3_128("\n".join(f"{p.uri}\t{p.fingerprint}" for p in parts).encode())
            fingerprint = f"inputs={len(parts)};xxh3={h.hexdigest()}"
        return SourcePlan(self, total, fingerprint, parts=parts)


def _unlike(part: Source, run: Layout, why: str) -> str:
    """Why input ``part`` cannot be loaded by a run of layout ``run`` (``why``: where the
    run's layout comes from)."""
    return (
        f"input {part.uri} holds records of {_own_layout(part)}, not of the run's layout "
        f"{_describe(run, why)}; one run loads records of one layout, and a raw file is read "
        "only under --layout, the dataset's layout or the default, never another input's: give --layout "
        "of the raw files' records, or load the inputs of each layout with their own command"
    )


def _own_layout(part: Source) -> str:
    """How a message names the layout of an input's own records."""
    try:
        own = part.records_layout(None, None)
    except BulkloadError:
        own = None
    if own is None:
        return "no layout of its own"
    if own.variable_length:
        return f"layout {own.name!r}"
    return "layout " + _describe(own, ", ".join(f"{f.name}:{f.type}" for f in own.fields))


def _describe(layout: Layout, detail: str) -> str:
    size = "" if layout.variable_length else f"{layout.record_size} bytes: "
    return f"{layout.name!r} ({size}{detail})"


def parse_sources(refs, layout: Layout | None = None, on_bad_file: str = "fail") -> Source:
    """The source of the SOURCE arguments ``refs`` (a string or a list of them)."""
    refs = expand(refs)
    if len(refs) == 1:
        return parse_source(refs[0], layout, on_bad_file)
    if layout is not None and directory_source(layout) is not None:
        raise UsageError(
            f"layout {layout.name} loads one source per run (a directory or gen://); "
            f"got {len(refs)}: load each with its own command"
        )
    parts = tuple(parse_source(ref, layout, on_bad_file) for ref in refs)
    _refuse_repeats(parts)
    streams = [p.uri for p in parts if not p.replayable]
    if streams and len(streams) < len(parts):
        raise UsageError(
            f"{streams[0]} is a stream (read once, never resumed) and cannot be loaded in one run "
            "with files or gen:// (which a re-run resumes); load the streams and the others with "
            "separate commands"
        )
    return ManyInputs(parts)


def expand(refs) -> list[str]:
    """The inputs ``refs`` names, globs replaced by the files they match (name order)."""
    if isinstance(refs, str):
        refs = [refs]
    out = []
    for ref in refs:
        ref = os.fspath(ref)
        if ref == "-" or "://" in ref or not any(c in ref for c in GLOB_CHARS) or os.path.lexists(ref):
            out.append(ref)
            continue
        found = sorted(p for p in glob.glob(ref, recursive=True) if not os.path.isdir(p))
        if not found:
            raise MissingPathError(
                f"no file matches {ref!r}; check the pattern (quote it so that bulkload, not the shell, expands it)"
            )
        out.extend(found)
    if not out:
        raise UsageError("no SOURCE given; name a file, a glob, gen://LAYOUT?n=N or - (stdin)")
    return out


def _refuse_repeats(parts: tuple[Source, ...]) -> None:
    seen: set[str] = set()
    for p in parts:
        if p.uri in seen:
            raise UsageError(
                f"input {p.uri} is given more than once; a run loads each input once (use --new-run "
                "in another command to load it again)"
            )
        seen.add(p.uri)
