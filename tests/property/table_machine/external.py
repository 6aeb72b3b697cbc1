"""ADD SEGMENT of external Parquet folders, and the external files no step may change.

``add_segment(folder, partition="g:string")``: rows drawn like an append's (keyed: new unique
keys, or on purpose a key already in the table or twice in the folder: DuplicateKeyError,
nothing written, no instant) are written with pyarrow, not through the storage seam, as Parquet
into a fresh folder outside the table on the in-memory filesystem
(``memory:///external/<run>/<n>``), Hive style as Spark lays it out: ``g=<value>/`` folders
(``g=x%2Fy``, ``g=__HIVE_DEFAULT_PARTITION__`` for null) of one or two files holding ``k`` and
``v`` only, sometimes beside a ``_SUCCESS`` file (not data). An acknowledged add is one commit
of one ``Success`` segment per partition folder, consecutive ids in folder order, ``external``,
format ``parquet``, ``path`` the folder, and its rows are the table's like an append's (deletes,
upserts and updates then take rows out of them through delete deltas inside the table).
Sometimes a folder already added is added again (InvalidOptionError, nothing changes, whatever
happened to its segments since), or the folder of an add that failed is retried (it commits,
unless a key of it is live by now: DuplicateKeyError).

Two rules of their own (issue 22), each on one step in five at most, check and restore: a live
external file rewritten after ADD SEGMENT is refused (``rewritten_external_file_is_refused``),
and so is a folder that links into the table (``linked_folder_is_refused``). The invariant
``external_files_are_untouched`` (``invariants``) checks every step leaves the folders as written.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from urllib.parse import quote

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import txn
from tests.property.table_machine.actions import AddSegment
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Expected, Folder, G, K, Row, Shape, _sort, memory_path

#: Hive's null partition folder value.
HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def hive_folder(g: str | None, name: str = "g") -> str:
    """The partition folder of ``g`` as Hive and Spark name it (``/`` escaped as ``%2F``), for
    the partition column's name ``name``."""
    return f"{name}={HIVE_NULL if g is None else quote(g, safe='')}"


class ExternalSegments(MachineCore):
    """ADD SEGMENT of folders the machine writes outside the table, and the rules that rewrite an
    external file or link a folder into the table."""

    def _expect_add(self, action: AddSegment, serial: int) -> Expected:
        """ADD SEGMENT of a new folder (written now), or of one added before or failed before."""
        folder = None
        if action.again is not None:
            # (A folder written before a schema change no longer has the table's columns.)
            earlier = [f for f in self.folders if f.state == action.again and f.shape == self.shape]
            if earlier:
                folder = earlier[action.position * len(earlier) // 1000]
        refused: type[Exception] | None
        if folder is None:
            rows, refused = self._new_rows(action.rows, action.clash, serial * 1000)
            folder = self._write_folder(rows, serial, files=action.files, marker=action.marker)
            label = f"add_segment of {len(folder.groups)} partition folder(s)"
        elif folder.state == "added":
            refused, label = txn.InvalidOptionError, "add_segment of a folder added before"
        else:
            live = self._live() if self.keyed else {}
            refused = txn.DuplicateKeyError if any(r[0] in live for r in folder.rows) else None
            label = "add_segment retried after a failure"
        note(f"add_segment {folder.url}: {label}, partition folders "
             f"{[(name, len(held)) for name, held in folder.groups]}")
        self.seen_keys.update(r[0] for r in folder.rows)
        url, partition = folder.url, f"{self.shape.name(G)}:string"
        return Expected("add_segment", lambda t: t.add_segment(url, "parquet", partition=partition),
                        _sort([*self.expected, *folder.rows]), added=len(folder.rows), deleted=0,
                        segment=False, refused=refused, label=label, written=_sort(list(folder.rows)),
                        folder=folder)

    def _write_folder(self, rows: list[Row], serial: int, *, files: int, marker: bool) -> Folder:
        """Write ``rows`` as a Hive-partitioned folder of Parquet files (``k``, ``v``; ``g`` in the
        folder names), as Spark would, straight onto the in-memory filesystem (no seam)."""
        url = f"{self.external_root}/{len(self.folders)}"
        base = memory_path(url)
        by_folder: dict[str, list[Row]] = {}
        for row in rows:
            by_folder.setdefault(hive_folder(row[1], self.shape.name(G)), []).append(row)
        written: list[tuple[str, list[Row]]] = []
        for name, held in by_folder.items():
            half = len(held) // 2
            parts = [held] if files == 1 or half == 0 else [held[:half], held[half:]]
            for n, part in enumerate(parts):
                relative = f"{name}/part-{n:05d}-{serial}.c000.snappy.parquet"
                data = self._external_data(self.shape, part)
                buffer = pa.BufferOutputStream()
                pq.write_table(data, buffer)
                self._put_external(f"{base}/{relative}", buffer.getvalue().to_pybytes(), part)
                written.append((relative, part))
        if marker:
            self._put_external(f"{base}/_SUCCESS", b"", None)
        # The table lists the files by path: a segment per partition folder, in that order.
        groups: dict[str, list[Row]] = {}
        for relative, part in sorted(written):
            groups.setdefault(relative.partition("/")[0], []).extend(part)
        folder = Folder(url, serial, tuple(rows),
                        tuple((name, _sort(held)) for name, held in groups.items()),
                        frozenset(f"{base}/{relative}" for relative, _ in written), shape=self.shape)
        self.folders.append(folder)
        return folder

    @staticmethod
    def _external_data(shape: Shape, rows: list[Row]) -> pa.Table:
        """An external file's data: the table's columns but the partition column (in the
        folder names)."""
        return shape.table(rows).drop_columns([shape.name(G)])

    def _put_external(self, path: str, data: bytes, rows: list[Row] | None) -> None:
        fsspec.filesystem("memory").pipe_file(path, data)
        self.external_files[path] = data
        if rows is not None:
            self.external_rows[path] = list(rows)

    def _untouched_by(self, table: txn.Table, attempt: Callable[[], object],
                      error: type[Exception], match: str) -> None:
        """``attempt`` raises ``error`` (its message matching ``match``) and writes nothing."""
        before = [(i.time, i.action, i.state) for i in table.timeline()]
        with pytest.raises(error, match=match):
            attempt()
        assert [(i.time, i.action, i.state) for i in table.timeline()] == before

    # Both rules check and restore, changing nothing: they run on one step in five at most, so
    # that the machine's steps stay the actions'.
    @precondition(lambda self: bool(self.external_rows) and self.steps % 5 == 2)
    @rule(data=st.data())
    def rewritten_external_file_is_refused(self, data: st.DataObject) -> None:
        """A live external file rewritten after ADD SEGMENT (a row more, or its rows in another
        order) fails reads, and keyed writes that would delete a row of it by position, with
        CorruptMetadataError naming it, and nothing is written; the file put back as it was
        added (the same memory file: bytes and creation time) reads as before."""
        table = self._open(self.inner)
        live = sorted(f.path for f in self._files(table)
                      if f.path.startswith("memory:") and memory_path(f.path) in self.external_rows)
        if not live:
            note("no live external file to rewrite")
            return
        url = data.draw(st.sampled_from(live), label="external file")
        path = memory_path(url)
        rows = self.external_rows[path]
        how = data.draw(st.sampled_from(["a row more", "reordered"]), label="rewrite")
        new = [*rows, (max(r[0] for r in rows) + 10**9, rows[0][1], 0)] if how == "a row more" \
            else rows[::-1]
        buffer = pa.BufferOutputStream()
        shape = next(f.shape for f in self.folders if path in f.files)
        pq.write_table(self._external_data(shape, new), buffer)
        # Keys whose live row is in this file, as the record index has them (an update may have
        # moved a row to a new file with the same values).
        groups = {r[0]: r[1] for r in rows}
        key_name = self.shape.name(K)
        held = [] if not self.keyed else [
            (found[key_name], groups[found[key_name]]) for found in table.lookup(list(groups)).to_pylist()
            if found["file"] == url]
        filesystem = fsspec.filesystem("memory")
        added = filesystem.store[path]
        event(f"external file rewritten: {how}")
        filesystem.pipe_file(path, buffer.getvalue().to_pybytes())
        try:
            found = re.escape(url)
            self._untouched_by(table, table.to_arrow, txn.CorruptMetadataError, found)
            if held:
                key, group = held[-1]
                replacement = self.shape.table([(key, group, 1)])
                self._untouched_by(table, lambda: table.upsert(replacement),
                                   txn.CorruptMetadataError, found)
                self._untouched_by(table, lambda: table.delete(keys=[key]),
                                   txn.CorruptMetadataError, found)
        finally:
            filesystem.store[path] = added
        assert self.shape.rows_of(table.to_arrow()) == self.expected

    @precondition(lambda self: "://" not in self.uri and self.steps % 5 == 4)
    @rule(data=st.data())
    def linked_folder_is_refused(self, data: st.DataObject) -> None:
        """ADD SEGMENT of a folder that reaches the table's own files through a symbolic link (a
        link to a data file, or to a segment folder, inside it; or the folder itself a link to a
        segment folder) is refused with InvalidOptionError, and nothing is written."""
        table = self._open(self.inner)
        native = sorted(f.path.removeprefix("file://") for f in self._files(table)
                        if "://" not in f.path or f.path.startswith("file://"))
        if not native:
            note("no data file of the table to link to")
            return
        target = data.draw(st.sampled_from(native), label="linked data file")
        how = data.draw(st.sampled_from(["file link", "folder link inside", "folder is a link"]),
                        label="link")
        event(f"ADD SEGMENT of a linked folder: {how}")
        outside = tempfile.mkdtemp(prefix="metatxn-linked-")
        try:
            folder = os.path.join(outside, "ext")
            # Each laid out as the table's partitioning wants (g=<value>/ folders), so that only
            # the link is wrong with it.
            partition = os.path.basename(os.path.dirname(target))
            if how == "folder is a link":
                os.symlink(os.path.dirname(os.path.dirname(target)), folder)
            elif how == "folder link inside":
                os.mkdir(folder)
                os.symlink(os.path.dirname(target), os.path.join(folder, partition))
            else:
                os.makedirs(os.path.join(folder, partition))
                os.symlink(target, os.path.join(folder, partition, "part-0.parquet"))
            # The partitioning named as the table's current version names it. After a rename
            # of the partition column the table's folders keep the old name, so the layout may
            # be refused before the link is looked at (a file link): refused, nothing written.
            option = f"{self.shape.name(G)}:string"
            renamed = partition.partition("=")[0] != self.shape.name(G)
            self._untouched_by(table, lambda: table.add_segment(folder, "parquet", partition=option),
                               txn.InvalidOptionError,
                               "inside the table|does not comply with the table's partitions"
                               if renamed else "inside the table")
        finally:
            shutil.rmtree(outside, ignore_errors=True)
