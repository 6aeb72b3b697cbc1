"""The FaultyStorage test helper: it must fail exactly the call it was told to, and never lie
about whether that call's write landed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from metatxn.timeline import ObjectExistsError, Storage, TxnError, open_storage
from tests.faults import FaultyStorage, InjectedFault, injected


@pytest.fixture
def inner(table_uri: str) -> Storage:
    return open_storage(table_uri)


@pytest.fixture
def store(inner: Storage) -> Iterator[FaultyStorage]:
    yield FaultyStorage(inner)


def test_it_is_a_storage_that_forwards_and_logs_every_call(
    store: FaultyStorage, inner: Storage
) -> None:
    assert isinstance(store, Storage)
    assert store.uri == inner.uri
    store.put_if_absent("a/x", b"1")
    store.put("a/y", b"22")
    assert store.read("a/x") == b"1"
    assert store.list("a") == ["a/x", "a/y"]
    assert store.exists("a/y") and store.size("a/y") == 2
    store.delete("a/y")
    assert store.call_log == [
        ("put_if_absent", "a/x"), ("put", "a/y"), ("read", "a/x"), ("list", "a"),
        ("exists", "a/y"), ("size", "a/y"), ("delete", "a/y"),
    ]
    assert all(c.outcome == "ok" and c.landed for c in store.calls)
    assert [c.index for c in store.calls] == list(range(1, 8))
    assert not inner.exists("a/y")


def test_a_fault_before_the_write_leaves_the_store_untouched(
    store: FaultyStorage, inner: Storage
) -> None:
    store.arm(1, when="before")
    with pytest.raises(InjectedFault) as caught:
        store.put_if_absent("x", b"1")
    fault = caught.value
    assert (fault.call.op, fault.call.path, fault.when, fault.landed) == (
        "put_if_absent", "x", "before", False)
    assert store.fault is fault and store.calls[-1].outcome == "injected"
    assert not inner.exists("x")
    store.put_if_absent("x", b"2")  # it fired once; the next call passes through
    assert inner.read("x") == b"2"


def test_a_fault_after_the_write_lets_it_land_then_raises(
    store: FaultyStorage, inner: Storage
) -> None:
    store.arm(1, when="after")
    with pytest.raises(InjectedFault) as caught:
        store.put_if_absent("x", b"1")
    assert caught.value.landed and caught.value.when == "after"
    assert inner.read("x") == b"1"
    assert store.landed_writes() == [store.calls[-1]]


def test_a_fault_after_a_call_that_failed_by_itself_reports_it_did_not_land(
    store: FaultyStorage, inner: Storage
) -> None:
    inner.put_if_absent("x", b"first")
    store.arm(1, when="after")
    with pytest.raises(InjectedFault) as caught:
        store.put_if_absent("x", b"second")
    assert caught.value.landed is False
    assert isinstance(caught.value.__cause__, ObjectExistsError)
    assert inner.read("x") == b"first"
    assert store.landed_writes() == []


def test_the_nth_matching_call_counts_from_the_moment_of_arming(
    store: FaultyStorage, inner: Storage
) -> None:
    store.put("before-arming", b"")
    store.arm(2, when="before", ops={"put"}, match=lambda p: p.startswith("t/"))
    store.put("t/1", b"")  # first matching call
    store.read("t/1")  # wrong op
    store.put("u/1", b"")  # wrong path
    with pytest.raises(InjectedFault) as caught:
        store.put("t/2", b"")
    assert caught.value.call.path == "t/2"
    assert not inner.exists("t/2")
    assert not store.armed


def test_a_crash_refuses_every_later_call_until_reset(store: FaultyStorage, inner: Storage) -> None:
    store.arm(1, when="after", crash=True)
    with pytest.raises(InjectedFault):
        store.put("x", b"1")
    assert store.dead
    with pytest.raises(InjectedFault):
        store.delete("x")
    assert inner.exists("x")
    assert store.calls[-1].outcome == "refused"
    assert store.fault is not None and store.fault.call.path == "x"
    store.reset()
    assert not store.dead and store.calls == [] and store.fault is None
    store.delete("x")
    assert not inner.exists("x")


def test_interleave_runs_another_actor_just_before_the_nth_call(
    store: FaultyStorage, inner: Storage
) -> None:
    store.interleave(1, lambda: inner.put_if_absent("x", b"rival"), ops={"put_if_absent"})
    with pytest.raises(ObjectExistsError):
        store.put_if_absent("x", b"mine")
    assert inner.read("x") == b"rival"
    assert store.calls[-1].outcome == "error"


def test_disarm_drops_a_plan_that_has_not_fired(store: FaultyStorage) -> None:
    store.arm(1)
    store.disarm()
    store.put("x", b"")
    assert store.fault is None


def test_injected_faults_are_not_errors_the_code_under_test_could_mistake_for_its_own(
    store: FaultyStorage,
) -> None:
    store.arm(1)
    with pytest.raises(InjectedFault) as caught:
        store.read("x")
    assert not isinstance(caught.value, (TxnError, OSError))
    wrapped = RuntimeError("wrapper")
    wrapped.__cause__ = caught.value
    assert injected(wrapped) is caught.value
    assert injected(RuntimeError("plain")) is None


@pytest.mark.parametrize(
    ("nth", "when", "ops"),
    [(0, "before", None), (1, "during", None), (1, "before", {"rename"})],
)
def test_nonsense_plans_are_refused(store: FaultyStorage, nth: int, when: str,
                                    ops: set[str] | None) -> None:
    with pytest.raises(ValueError):
        store.arm(nth, when=when, ops=ops)  # type: ignore[arg-type]
