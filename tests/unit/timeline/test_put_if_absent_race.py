"""put-if-absent raced by threads in several processes: exactly one winner per key.

The threads of every process line up on one multiprocessing barrier before each round, then all
of them create the same key. Every outcome is reported through a queue, so a second winner, an
unexpected error or a missing report all fail the test. Payloads are large and distinct per
writer, so a torn or interleaved write shows up as content that matches nobody's payload.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from metatxn.timeline import Storage, open_storage

pytestmark = pytest.mark.multiprocess

WON = "won"


class Race(NamedTuple):
    processes: int
    threads: int
    rounds: int
    payload_bytes: int

    @property
    def writers(self) -> int:
        return self.processes * self.threads


def race_key(round_: int) -> str:
    return f"_timeline/race/{round_:03d}.commit"


def payload(writer: str, round_: int, size: int) -> bytes:
    """The bytes ``writer`` tries to create in ``round_``: unique to both, rebuilt by the parent."""
    unit = f"<{writer} round {round_}>".encode()
    return (unit * (size // len(unit) + 1))[:size]


def _race_in_child(
    uri: str,
    storage_options: dict[str, Any] | None,
    process_index: int,
    race: Race,
    barrier: Any,
    outcomes: Any,
) -> None:
    """Child process: ``race.threads`` threads, each creating every round's key once."""
    storage = open_storage(uri, storage_options)
    storage.exists("warm-up")  # set up the client before the race, not during it

    def writer_thread(thread_index: int) -> None:
        writer = f"p{process_index}t{thread_index}"
        for round_ in range(race.rounds):
            data = payload(writer, round_, race.payload_bytes)
            try:
                barrier.wait(timeout=60)
                storage.put_if_absent(race_key(round_), data)
                outcome = WON
            except Exception as exc:  # report every outcome; the parent judges them
                outcome = type(exc).__name__
            outcomes.put((round_, writer, outcome))

    threads = [threading.Thread(target=writer_thread, args=(t,)) for t in range(race.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def run_race(
    uri: str, storage_options: dict[str, Any] | None, race: Race, *,
    child: Callable[..., None] = _race_in_child, leading: Sequence[tuple[Any, ...]] = (),
) -> dict[int, list[tuple[str, str]]]:
    """Run the race in spawned processes; return every outcome, by round. ``child`` (a
    module-level function, as ``_race_in_child``) takes ``leading[i]``'s values first in
    process ``i``: what sets that process up differently."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(race.writers)
    outcomes = context.Queue()
    processes = [
        context.Process(target=child,
                        args=(*(leading[index] if leading else ()), uri, storage_options, index,
                              race, barrier, outcomes))
        for index in range(race.processes)
    ]
    for process in processes:
        process.start()
    by_round: dict[int, list[tuple[str, str]]] = defaultdict(list)
    try:
        # Drain the queue before joining: a child cannot exit while its queue feeder is blocked.
        for _ in range(race.writers * race.rounds):
            round_, writer, outcome = outcomes.get(timeout=120)
            by_round[round_].append((writer, outcome))
    except queue.Empty:
        pytest.fail(f"only {sum(map(len, by_round.values()))} of "
                    f"{race.writers * race.rounds} outcomes arrived: {dict(by_round)}")
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    assert [p.exitcode for p in processes] == [0] * race.processes
    return by_round


def assert_one_winner_per_key(storage: Storage, race: Race,
                              by_round: dict[int, list[tuple[str, str]]]) -> None:
    """Per key: one winner, every other writer lost with ObjectExistsError, winner's bytes kept."""
    assert sorted(by_round) == list(range(race.rounds))
    for round_, results in sorted(by_round.items()):
        assert len(results) == race.writers
        assert len({writer for writer, _ in results}) == race.writers
        winners = [writer for writer, outcome in results if outcome == WON]
        assert len(winners) == 1, f"round {round_}: winners {winners}"
        losses = {outcome for _, outcome in results if outcome != WON}
        assert losses == {"ObjectExistsError"}, f"round {round_}: {results}"
        stored = storage.read(race_key(round_))
        assert stored == payload(winners[0], round_, race.payload_bytes), (
            f"round {round_}: the stored object is not {winners[0]}'s payload "
            f"({len(stored)} bytes, starting {stored[:40]!r})"
        )
    assert storage.list("_timeline/race") == [race_key(r) for r in range(race.rounds)]


def test_processes_racing_on_local_disk_have_exactly_one_winner_per_key(tmp_path: Path) -> None:
    """4 processes x 8 threads, 10 keys, 256 KiB payloads: one winner each, nothing torn, and no
    temporary file left behind."""
    race = Race(processes=4, threads=8, rounds=10, payload_bytes=256 * 1024)
    uri = str(tmp_path / "table")
    by_round = run_race(uri, None, race)

    assert_one_winner_per_key(open_storage(uri), race, by_round)
    # LocalStorage stages every write in ".<name>.<pid>.<tid>.<n>.tmp" beside the final name.
    names = os.listdir(tmp_path / "table" / "_timeline" / "race")
    assert sorted(names) == [race_key(r).rsplit("/", 1)[1] for r in range(race.rounds)]


@pytest.mark.s3
def test_processes_racing_on_s3_have_exactly_one_winner_per_key(s3_uri) -> None:  # type: ignore[no-untyped-def]
    """The same race through the S3 backend's conditional PUT, against the moto server."""
    race = Race(processes=3, threads=4, rounds=4, payload_bytes=256 * 1024)
    by_round = run_race(s3_uri.uri, s3_uri.storage_options, race)
    assert_one_winner_per_key(s3_uri.open(), race, by_round)
