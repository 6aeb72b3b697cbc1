"""ADD SEGMENT (CarbonData's ``ALTER TABLE t ADD SEGMENT OPTIONS('path'=..., 'format'=...)``):
existing Parquet, ORC, CSV or JSON files join the table where they are, in one commit.

Everything is read and checked before the instant begins (options, the folder's listing, each
file's schema, rows and statistics, and the keys of a keyed table), so a refused request writes
nothing. The commit then records, like any load: the files (URL, size, modification time, rows)
in ``files``, their statistics in ``column_stats``, one ``Success`` segment per partition folder
(``external``, with its format and the folder's path) in ``segments``, and (keyed tables) the
files' keys in the record index. No data file is written, moved or converted.

The instant runs under one hold of the table lock: its write phase only writes index entries,
and checking under the same lock that no other commit added these files (or keys) meanwhile is
what keeps one file from joining the table twice.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import FILES, SEGMENTS
from metatxn.timeline import DuplicateKeyError, InvalidOptionError, TimelineView

from .._commit import AddSegment, ExternalLoad, Progress
from .._context import TableContext
from .._files import KeyLocations
from .._results import Commit
from .._rows import check_not_null, check_unique, describe, index_keys
from .._write import State, commit_planned, find_keys
from ._inspect import Inspected, Inspector
from ._listing import list_folder
from ._request import AddRequest, check_outside, check_request, check_targets

log = logging.getLogger("metatxn")

def add_segment(context: TableContext, path: Any, file_format: Any = "parquet", *,
                partition: Any = None, storage_options: Any = None,
                extra: dict[str, str] | None = None, progress: Progress | None = None) -> Commit | None:
    """Register the files below ``path`` as external segment(s); see :meth:`txn.Table.add_segment`."""
    request = check_request(context.uri, context.schema, context.partition_by, path, file_format,
                            partition, storage_options)
    reader = context.store.external_reader()
    options = request.storage_options or reader.options_for(request.url)
    url, folders = list_folder(request.url, options, context.schema, context.partition_by)
    request = dataclasses.replace(request, url=url)
    check_outside(context.uri, url)
    if request.storage_options:  # later reads of this folder through this handle use them too
        reader.options[url] = request.storage_options
    listed = [file for folder in folders for file in folder.files]
    targets = {file.url: reader.resolve(file.url) for file in listed}
    check_targets(context.uri, url, listed, targets)
    _refuse_taken(context, context.timeline.load(), url, targets)
    inspected = Inspector(reader, request.format, context.record_key_columns, schema=context.schema,
                          partition_by=context.partition_by,
                          schema_id=context.schema_id).inspect(folders)
    load = _load(context, request, inspected)

    def plan(state: State) -> AddSegment:
        if load.located is not None:
            existing = find_keys(context, state, index_keys(load.located.keys,
                                                             context.record_key_columns))
            if existing.num_rows:
                raise DuplicateKeyError(
                    f"add_segment: record key(s) {describe(existing, context.record_key_columns)} "
                    f"of {request.url} already exist in the table; nothing was added\n"
                    "Help: remove those rows from the table or from the folder first")
        return AddSegment(load=load, read_at=state.read_at, current=state.deltas,
                          admission=lambda view: _refuse_taken(context, view, url, targets))

    commit = commit_planned(context, plan, extra, progress=progress)
    if commit is None:  # its producer committed this version already (found under the lock)
        return None
    log.info("added %d %s file(s) of %s as segment(s) %s", commit.files_added, request.format,
             request.url, commit.segment)
    return commit


def _load(context: TableContext, request: AddRequest, inspected: list[list[Inspected]]) -> ExternalLoad:
    groups = [[item.status for item in folder] for folder in inspected]
    columns = context.record_key_columns
    if not columns:
        return ExternalLoad(request.url, request.format, groups)
    keys, files, positions, key_groups = [], [], [], []
    for group, folder in enumerate(inspected):
        for item in folder:
            assert item.keys is not None
            count = item.keys.num_rows
            keys.append(item.keys.select(columns))
            files.append(pa.repeat(pa.scalar(item.status.path, pa.string()), count))
            positions.append(np.arange(count, dtype=np.int64))
            key_groups.append(np.full(count, group, dtype=np.int64))
    all_keys = pa.concat_tables(keys)
    check_not_null(all_keys, columns)
    check_unique(all_keys, columns)
    located = KeyLocations(keys=all_keys,
                           file=pc.dictionary_encode(pa.concat_arrays(files))
                           if files else pa.array([], pa.string()),
                           position=pa.array(np.concatenate(positions)))
    return ExternalLoad(request.url, request.format, groups, located,
                        np.concatenate(key_groups).tolist())


def _refuse_taken(context: TableContext, view: TimelineView, url: str,
                  targets: dict[str, str]) -> None:
    """Refuse a folder (or a file) the table already holds, as CarbonData refuses the same path
    twice; run before the instant and again under the lock when it begins. ``targets``: each new
    file's URL -> the file it names once symbolic links are followed, compared with what the
    table's files name: one file under two names is still one file."""
    metadata = context.metadata_at(view, None, (SEGMENTS, FILES))
    for entry in (metadata.segments or {}).values():
        if entry.is_live and entry.external and entry.path == url:
            raise InvalidOptionError(
                f"add_segment: path {url!r} is already segment {entry.id} of the table; "
                "expected a folder not added before (the same path cannot be added twice)")
    assert metadata.files is not None
    # Removed files count too: the files partition is a two-phase set (a key added once, removed
    # once), so a file whose segment was deleted or compacted cannot join the table again.
    external = metadata.files.filter(pc.match_substring(metadata.files["path"], "://"))
    reader = context.store.external_reader()
    held: dict[str, dict[str, Any]] = {}
    for row in external.select(["path", "segment", "deleted"]).to_pylist():
        held.setdefault(row["path"], row)
        held.setdefault(reader.resolve(row["path"]), row)
    taken = [(new, target, held.get(new) or held[target]) for new, target in targets.items()
             if new in held or target in held]
    if taken:
        new, target, first = taken[0]
        was = "belongs" if first["deleted"] is False else "belonged"
        linked = f" (a link to {target})" if target != new else ""
        same = "" if first["path"] in (new, target) else f" as {first['path']}"
        raise InvalidOptionError(
            f"add_segment: {new}{linked} {was} to segment {first['segment'] or '?'} of the "
            f"table{same} ({len(taken)} file(s) of {url!r} do); expected files that were never "
            "part of it (a file joins a table once: copy the folder to add its data again)")
