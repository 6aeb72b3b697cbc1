"""Corruption as a test suite: every kind of file a table keeps, damaged every way.

For each kind of file (table.json, instant files, archives, lock and heartbeat records, the
metadata table's blocks and bases (producers' stream records included), timeline and retention
record, data files, delete deltas and markers) and each damage (truncated, garbage, empty,
deleted), the outcome of reading, looking up keys, validating and writing must be one of:

* harmless: the operation gives the same answer as on the undamaged table;
* a ``txn.TxnError`` whose message names the damaged file;

and ``validate()`` never raises on damage, and reports every damaged file (a few deletions that
are harmless or look like a normal state are advisory: ``ADVISORY`` says why each is), and
always the file an operation failed because of. Rows never change silently.

One template table is built per module (a keyed, partitioned table with metadata compactions,
cleaning, archival, delete deltas, record-index bases and logs, and a writer that died before
its commit point); each case damages one file of a copy of it on local disk.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
from metatxn import timeline
from tests.unit.txn.helpers import Faulty, table_on

SCHEMA = pa.schema([("id", pa.int64(), False), ("region", pa.string()), ("price", pa.float64())])
PROPERTIES = {
    "metadata.compact_after": "3",
    "metadata.retain_commits": "2",
    "timeline.archive.trigger": "4",
    "timeline.archive.retain": "2",
    "record_index.shards": "4",
    # A deleted release record leaves the lock looking held until its lease ends: keep it short.
    "lock.lease_ms": "5000",
}
LOOKUP_KEYS = [1, 2, 11, 21, 41, 100, 200, 999]
NEW_KEYS = [300, 301]


def _rows(ids: list[int] | range) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "region": pa.array(["eu" if i % 2 else "us" for i in ids], pa.string()),
                     "price": pa.array([i / 2 for i in ids], pa.float64())}, schema=SCHEMA)


_INDEX_LOG = re.compile(r"^_metadata/record_index/\d{17}\.log\.arrow$")


class Template:
    def __init__(self, root: Path) -> None:
        self.root = root
        table = txn.create_table(str(root), SCHEMA, record_key="id", partition_by=["region"],
                                 properties=PROPERTIES)
        for i in range(6):  # idempotent loads: the streams partition's records
            table.append(_rows(range(i * 10, i * 10 + 5)), app_id="loads", version=i)
        table.upsert(_rows([1, 2, 100]))
        table.delete(keys=[11])
        table.append(_rows([200, 201]))  # the third metadata compaction
        # blocks of every partition after the newest bases
        table.upsert(_rows([3, 202]), app_id="fixes", version=1)
        self.before_last = _sorted(table.to_arrow())
        # The last data instant beats a heartbeat, so that it has a requested file: a small
        # write of a format-2 table is requested started (its plan in its inflight file).
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", -1)
            table.delete(keys=[21])
        self.rows = _sorted(table.to_arrow())
        self.lookup = _sorted(table.lookup(LOOKUP_KEYS))
        # A writer that dies in its write phase, after its record-index log landed: a pending
        # instant with its heartbeat, markers and data files (it never took the lock).
        faulty = Faulty(timeline.open_storage(str(root)))
        faulty.arm(1, when="after", ops={"put_if_absent"},
                   match=lambda p: _INDEX_LOG.match(p) is not None, crash=True)
        # (A write past the small-write bound: a small one would hold the lock, with no heartbeat.)
        with pytest.MonkeyPatch.context() as patch, pytest.raises(Exception):  # noqa: B017 - the injected death
            patch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", -1)
            table_on(str(root), faulty).upsert(_rows([5, 500]))
        self.files = sorted(timeline.open_storage(str(root)).list("", recursive=True))
        view = timeline.Timeline(timeline.open_storage(str(root))).load()
        self.pending = view.pending()[-1].time
        data = [i for i in view.completed() if i.action in ("commit", "replacecommit")]
        self.last = data[-1]
        self.oldest = data[0]
        assert txn.open_table(str(root)).validate().ok


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return Template(tmp_path_factory.mktemp("template") / "table")


def _one(files: list[str], pattern: str, *, last: bool = True) -> str:
    found = [f for f in files if re.fullmatch(pattern, f)]
    assert found, f"no file matches {pattern}"
    return found[-1] if last else found[0]


def _newest_block(partition: str) -> Callable[[Template], str]:
    def pick(t: Template) -> str:
        # The newest block of a completed instant (the pending writer's block is not read).
        return _one([f for f in t.files if t.pending not in f],
                    rf"_metadata/{partition}/\d{{17}}\.log\.arrow")
    return pick


def _newest_base(partition: str, suffix: str = "arrow") -> Callable[[Template], str]:
    def pick(t: Template) -> str:
        pattern = rf"_metadata/{partition}/\d{{17}}_\d{{17}}\.base\.{suffix}"
        bases = [f for f in t.files if re.fullmatch(pattern, f)]
        return max(bases, key=lambda f: f.rsplit("/", 1)[1])
    return pick


def _newest(t: Template, pattern: str) -> str:
    """The newest matching file of a completed instant (names end with ``_<T>.<suffix>``)."""
    found = [f for f in t.files if re.fullmatch(pattern, f) and t.pending not in f]
    return max(found, key=lambda f: f.rsplit("_", 1)[-1])


def _live_data_file(t: Template) -> str:
    return _newest(t, r"region=\w+/.*\.parquet")


def _old_data_file(t: Template) -> str:
    return _one([f for f in t.files if t.oldest.time in f], r"region=\w+/.*\.parquet", last=False)


KINDS: dict[str, Callable[[Template], str]] = {
    "table.json": lambda t: "_timeline/table.json",
    "requested": lambda t: f"_timeline/{t.last.time}.{t.last.action}.requested",
    "inflight": lambda t: f"_timeline/{t.last.time}.{t.last.action}.inflight",
    # A completed small write's inflight file, which holds its plan (format 2).
    "inflight-plan": lambda t: _one([f for f in t.files if t.last.time not in f and t.pending not in f],
                                    r"_timeline/\d{17}\.\w+\.inflight"),
    "completed": lambda t: f"_timeline/{t.last.time}_{t.last.completed_at}.{t.last.action}",
    "completed-oldest": lambda t: f"_timeline/{t.oldest.time}_{t.oldest.completed_at}.{t.oldest.action}",
    "pending-requested": lambda t: _one(t.files, rf"_timeline/{t.pending}\.\w+\.requested"),
    "pending-inflight": lambda t: _one(t.files, rf"_timeline/{t.pending}\.\w+\.inflight"),
    "archive": lambda t: _one(t.files, r"_timeline/archive/.*\.archive"),
    "lock": lambda t: _one(t.files, r"_timeline/lock/\d+"),
    "heartbeat": lambda t: _one(t.files, r"_timeline/heartbeats/\d+"),
    "mdt-deltacommit": lambda t: _one([f for f in t.files if t.pending not in f],
                                      r"_metadata/_timeline/\d{17}_\d{17}\.deltacommit"),
    "mdt-compaction": lambda t: _one(t.files, r"_metadata/_timeline/\d{17}_\d{17}\.compaction"),
    "mdt-compaction-oldest": lambda t: _one(t.files, r"_metadata/_timeline/\d{17}_\d{17}\.compaction",
                                            last=False),
    "mdt-archive": lambda t: _one(t.files, r"_metadata/_timeline/archive/.*\.archive"),
    "files-log": _newest_block("files"),
    "column-stats-log": _newest_block("column_stats"),
    "segments-log": _newest_block("segments"),
    "deletes-log": lambda t: _one(t.files, r"_metadata/deletes/\d{17}\.log\.arrow"),
    "streams-log": _newest_block("streams"),
    "record-index-log": _newest_block("record_index"),
    "files-base": _newest_base("files"),
    "column-stats-base": _newest_base("column_stats"),
    "segments-base": _newest_base("segments"),
    "deletes-base": _newest_base("deletes"),
    "streams-base": _newest_base("streams"),
    "record-index-base": _newest_base(r"record_index/\d{4}", "arrow"),
    "retention.json": lambda t: "_metadata/retention.json",
    "data-file": _live_data_file,
    "data-file-old": _old_data_file,
    "delete-delta": lambda t: _newest(t, r"region=\w+/.*\.deletedelta"),
    "marker": lambda t: _one(t.files, rf"_markers/.*_{t.pending}\.parquet"),
}


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(bytes((7 * i + 13) % 256 for i in range(max(len(data), 16))))
    elif how == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()


def _names(error: BaseException, path: str) -> bool:
    name = os.path.basename(path)  # as it is, or escaped as repr() quotes it
    return name in str(error) or repr(name)[1:-1] in str(error)


def _reported(report: txn.ValidationReport, path: str) -> bool:
    name = os.path.basename(path)
    # A lost completed file is reported by its instant; its completion time is unknown.
    unknown = re.sub(r"^(\d{17})_\d{17}\.", r"\1_<completion>.", name)
    return any(n in problem.path or n in problem.detail for problem in report.problems
               for n in (name, unknown))


DAMAGES = ["truncated", "garbage", "empty", "deleted"]

#: Damage that ``validate()`` need not report when no operation failed: deleting these files is
#: harmless or cannot be told from a normal state. Every other damaged file must be reported.
ADVISORY: dict[tuple[str, str], str] = {
    ("heartbeat", "deleted"): "optional: a pending instant without one is judged by its time",
    ("lock", "deleted"): "lock records come and go; a missing one is a released lock",
    ("requested", "deleted"): "a completed instant is decided by its completed file alone, and "
                              "archival deletes the plan first, so this is also an interrupted archival",
    ("inflight", "deleted"): "as for requested",
    ("inflight-plan", "deleted"): "as for requested: it is the plan of a completed instant",
    ("pending-inflight", "deleted"): "the same as a writer that died before it started: the "
                                     "rollback of a requested instant",
    ("completed", "deleted"): "the same as a crash just before the commit point (reported as "
                              "an expired instant once its heartbeat expires)",
    ("archive", "deleted"): "history past retention that nothing records the existence of: "
                            "a deleted archive cannot be told from one never written",
    ("mdt-archive", "deleted"): "as for archive",
    ("mdt-compaction", "deleted"): "the newest compaction without its completed file is a "
                                   "compaction that died: its bases are never used",
    ("mdt-deltacommit", "deleted"): "a record only (the data timeline decides which blocks "
                                    "count): losing it leaves its instant's blocks unchecked, as "
                                    "archiving it does (metadata-table.md)",
    ("record-index-base", "deleted"): "a compaction rewrites only the shards that changed, so "
                                      "no record says which shard bases exist; what the base held "
                                      "is checked entry by entry against the data files",
    ("retention.json", "deleted"): "it only turns the error for a snapshot older than retention "
                                   "into one naming a cleaned block; the next clean rewrites it",
}


@pytest.mark.allow_metatxn_warnings  # maintenance after a write logs what it cannot read; see below
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_damaged_file_is_harmless_or_named(template: Template, tmp_path: Path, kind: str,
                                             damage: str, caplog: pytest.LogCaptureFixture) -> None:
    uri = tmp_path / "table"
    shutil.copytree(template.root, uri)
    path = KINDS[kind](template)
    _damage(uri / path, damage)
    _check(template, uri, path, kind, damage, caplog, advisory=(kind, damage) in ADVISORY)


#: Names a file in a timeline folder can have by mistake or damage: named like an instant file
#: (it starts with a digit) but not one, and a stray name nothing reads (advisory: ignored).
BAD_NAMES = {
    "no-completion": "20260101000000000.commit",
    "bad-completion": "20260101000000000_x.commit",
    "short-time": "2026.commit.inflight",
    "unknown-state": "20260101000000000_20260101000000001.commit.extra",
    "garbage": "1\x7f\x01\u00e9%20 .requested",
    "stray": "notes.txt",
}


@pytest.mark.allow_metatxn_warnings
@pytest.mark.parametrize("name", sorted(BAD_NAMES))
@pytest.mark.parametrize("folder", ["_timeline", "_metadata/_timeline"])
def test_a_badly_named_timeline_file_is_harmless_or_named(
        template: Template, tmp_path: Path, folder: str, name: str,
        caplog: pytest.LogCaptureFixture) -> None:
    uri = tmp_path / "table"
    shutil.copytree(template.root, uri)
    path = f"{folder}/{BAD_NAMES[name]}"
    (uri / path).write_bytes(b'{"kind": "instant"}')
    _check(template, uri, path, f"{folder}/{name}", "named", caplog, advisory=name == "stray")


def _check(template: Template, uri: Path, path: str, kind: str, damage: str,
           caplog: pytest.LogCaptureFixture, *, advisory: bool) -> None:
    """Reads, lookups, validate and a write on the damaged copy at ``uri``."""
    failures: list[BaseException] = []

    def attempt(operation: Callable[[], Any], expected: Any = None, *,
                also: Any = None) -> Any:
        try:
            result = operation()
        except txn.TxnError as error:
            assert _names(error, path), f"{kind}/{damage}: {type(error).__name__} does not name " \
                                        f"{path}: {error}"
            failures.append(error)
            return None
        if expected is not None:
            assert result == expected or (also is not None and result == also), \
                f"{kind}/{damage}: the answer changed without an error"
        return result

    table = attempt(lambda: txn.open_table(str(uri)))
    if table is None:
        return  # nothing to validate without a table.json
    # Deleting the completed file of the last commit is a crash before its commit point.
    also = template.before_last if (kind, damage) == ("completed", "deleted") else None
    attempt(lambda: _sorted(table.to_arrow()), template.rows, also=also)
    attempt(lambda: _sorted(table.lookup(LOOKUP_KEYS)), None if also else template.lookup)
    attempt(lambda: table.timeline())
    report = table.validate()  # never raises
    if failures or not advisory:
        assert _reported(report, path), f"{kind}/{damage}: validate() does not report {path}: {report}"
    caplog.clear()
    written = attempt(lambda: table.upsert(_rows(NEW_KEYS)))
    if written is not None:
        after = attempt(lambda: _sorted(txn.open_table(str(uri)).to_arrow()))
        if after is not None and also is None:
            assert after == _sorted(pa.concat_tables([
                pa.Table.from_pylist(template.rows, SCHEMA), _rows(NEW_KEYS)]))
    if failures:
        assert _reported(report, path), f"{kind}/{damage}: validate() does not report {path}: {report}"
    # Maintenance after a commit (metadata compaction, cleaning, archival) logs what it cannot
    # do instead of failing the commit: it too must name the file, and validate() report it.
    logged = [f"{r.getMessage()}: {r.exc_info[1] if r.exc_info else ''}" for r in caplog.records
              if r.name == "metatxn" and r.levelno >= logging.WARNING]
    for message in logged:
        assert os.path.basename(path) in message, f"{kind}/{damage}: logged without the file: {message}"
        assert _reported(report, path), f"{kind}/{damage}: validate() does not report {path}: {report}"
