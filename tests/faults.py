"""Failure injection at the storage seam: a :class:`FaultyStorage` wrapper for tests.

``FaultyStorage`` wraps any :class:`timeline.Storage` and forwards every call to it, keeping a
log of the calls made. It can be armed to fail one later call with :class:`InjectedFault`:

* ``when="before"``: the call raises before it reaches the inner store ("raise before write"),
  so nothing changed;
* ``when="after"``: the call runs against the inner store and then raises ("write lands then
  raise"): the caller cannot tell that its write landed, like a lost response. For reads and
  listings it only means the call happened and its result was lost.

Faults fire once: the wrapper disarms itself when it fires, and later calls pass through, like a
transient network error that the code under test sees and handles. Arm with ``crash=True`` to
model a process that dies at that call instead: every later call is refused too, so no cleanup
(``finally`` blocks, context-manager exits, lock releases) can reach the store. Tests then
assert on the durable state of the *inner* store, which the fault never corrupts: a write is
either wholly there or not at all, exactly as the storage contract promises.

Guarantees: the call log records every call in the order the calls started, with its outcome;
arming, firing and logging are thread safe, so several threads may share one wrapper (the
fault then hits whichever thread makes the Nth matching call). Not guaranteed: which of several
threads is "Nth" is up to the scheduler.

Example:
    >>> from metatxn.timeline import MemoryStorage
    >>> store = FaultyStorage(MemoryStorage("/faults-doc"))
    >>> store.arm(1, when="after", ops={"put_if_absent"})
    >>> try:
    ...     store.put_if_absent("a", b"1")
    ... except InjectedFault as fault:
    ...     print(fault.call.op, fault.call.path, fault.landed)
    put_if_absent a True
    >>> store.read("a")
    b'1'
"""

from __future__ import annotations

import builtins
import errno
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from metatxn.timeline import Storage

T = TypeVar("T")

When = Literal["before", "after"]
Outcome = Literal["pending", "ok", "error", "injected", "refused"]

#: Every operation of the Storage protocol, and the ones among them that change the store.
OPS: frozenset[str] = frozenset({"read", "put_if_absent", "put", "list", "delete", "exists", "size"})
WRITE_OPS: frozenset[str] = frozenset({"put_if_absent", "put", "delete"})


@dataclass
class Call:
    """One call made through a :class:`FaultyStorage`.

    ``outcome`` is ``"ok"`` (the inner call returned), ``"error"`` (the inner call raised on its
    own, e.g. ``ObjectExistsError``), ``"injected"`` (this call raised the armed
    :class:`InjectedFault`), ``"refused"`` (made after a ``crash=True`` fault, never reached the
    store) or ``"pending"`` (still running). ``landed`` says whether the inner call ran to
    completion, which for a write means its change is durable in the inner store.
    """

    index: int
    op: str
    path: str
    outcome: Outcome = "pending"
    landed: bool = False

    @property
    def is_write(self) -> bool:
        return self.op in WRITE_OPS


class InjectedFault(Exception):
    """The failure a :class:`FaultyStorage` was armed to raise.

    Deliberately not a ``TxnError`` (nor an ``OSError``), so code under test cannot mistake it
    for one of its own outcomes and swallow it.

    Attributes:
        call: the call that failed.
        when: ``"before"`` (the inner store was not touched) or ``"after"`` (it was).
        landed: whether the inner call ran to completion before the fault was raised; always
            False for ``"before"``, and False for ``"after"`` if the inner call itself raised.
    """

    def __init__(self, call: Call, when: When, landed: bool) -> None:
        self.call = call
        self.when = when
        self.landed = landed
        verb = "after it landed" if landed else ("before it ran" if when == "before" else
                                                  "after it failed")
        super().__init__(f"injected fault on call #{call.index} {call.op}({call.path!r}) {verb}")


@dataclass
class _Plan:
    remaining: int
    when: When
    ops: frozenset[str]
    match: Callable[[str], bool] | None
    action: Callable[[], object] | None = None
    crash: bool = False

    def matches(self, op: str, path: str) -> bool:
        return op in self.ops and (self.match is None or self.match(path))


class FaultyStorage:
    """A :class:`timeline.Storage` that logs its calls and fails one of them on request.

    Args:
        inner: the store that really holds the data; faults never bypass or corrupt it.
    """

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.calls: list[Call] = []
        #: The fault that fired, if any, since construction or the last :meth:`reset`.
        self.fault: InjectedFault | None = None
        self._plan: _Plan | None = None
        self._hooks: list[_Plan] = []
        self._dead = False
        self._mutex = threading.Lock()

    # -- scripting -----------------------------------------------------------------------------

    def arm(
        self,
        nth: int = 1,
        *,
        when: When = "before",
        ops: Iterable[str] | None = None,
        match: Callable[[str], bool] | None = None,
        crash: bool = False,
    ) -> None:
        """Fail the ``nth`` matching call from now on (1 = the very next one).

        Args:
            when: ``"before"``: raise without touching the inner store; ``"after"``: run the
                call, then raise.
            ops: only calls of these operations count (default: all of them).
            match: only calls whose path satisfies this predicate count.
            crash: after firing, refuse every later call with :class:`InjectedFault` (the
                process died there); :meth:`reset` revives the wrapper.

        Re-arming replaces an earlier plan that has not fired yet.
        """
        plan = self._make_plan(nth, when, ops, match)
        plan.crash = crash
        with self._mutex:
            self._plan = plan

    def interleave(
        self,
        nth: int,
        action: Callable[[], object],
        *,
        ops: Iterable[str] | None = None,
        match: Callable[[str], bool] | None = None,
    ) -> None:
        """Run ``action`` just before the ``nth`` matching call from now on reaches the store.

        This is how a test lines up a race deterministically: ``action`` plays another writer
        (on its own storage handle) at exactly that point. Calls ``action`` makes through this
        same wrapper are logged and counted like any other.
        """
        plan = self._make_plan(nth, "before", ops, match)
        plan.action = action
        with self._mutex:
            self._hooks.append(plan)

    def disarm(self) -> None:
        """Drop the fault plan (and interleavings) that have not fired; keep the log."""
        with self._mutex:
            self._plan = None
            self._hooks.clear()

    def reset(self) -> None:
        """Disarm, forget the fault that fired and clear the call log."""
        with self._mutex:
            self._plan = None
            self._hooks.clear()
            self.fault = None
            self.calls = []
            self._dead = False

    @property
    def armed(self) -> bool:
        return self._plan is not None

    @property
    def fired(self) -> bool:
        return self.fault is not None

    @property
    def dead(self) -> bool:
        """Whether a ``crash=True`` fault fired: every call is now refused."""
        return self._dead

    # -- reading the log -----------------------------------------------------------------------

    @property
    def call_log(self) -> list[tuple[str, str]]:
        """The calls made, as ``(op, path)`` pairs in the order they started."""
        return [(c.op, c.path) for c in self.calls]

    def count(self, op: str | None = None) -> int:
        """How many calls (of ``op``, if given) were made."""
        return sum(1 for c in self.calls if op is None or c.op == op)

    def landed_writes(self) -> list[Call]:
        """The write calls whose change reached the inner store, in order.

        This includes the faulted call when its write landed ("write lands then raise"), and
        excludes writes that failed on their own (a ``put_if_absent`` that lost its race).
        """
        return [c for c in self.calls if c.is_write and c.landed]

    # -- the Storage protocol ------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self.inner.uri

    def read(self, path: str) -> bytes:
        return self._call("read", path, lambda: self.inner.read(path))

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._call("put_if_absent", path, lambda: self.inner.put_if_absent(path, data))

    def put(self, path: str, data: bytes) -> None:
        self._call("put", path, lambda: self.inner.put(path, data))

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        return self._call("list", prefix, lambda: self.inner.list(prefix, recursive=recursive))

    def delete(self, path: str) -> None:
        self._call("delete", path, lambda: self.inner.delete(path))

    def exists(self, path: str) -> bool:
        return self._call("exists", path, lambda: self.inner.exists(path))

    def size(self, path: str) -> int:
        return self._call("size", path, lambda: self.inner.size(path))

    def __repr__(self) -> str:
        return f"FaultyStorage({self.inner!r}, calls={len(self.calls)}, armed={self.armed})"

    # -- machinery -----------------------------------------------------------------------------

    @staticmethod
    def _make_plan(nth: int, when: When, ops: Iterable[str] | None,
                   match: Callable[[str], bool] | None) -> _Plan:
        if nth < 1:
            raise ValueError(f"nth counts from 1 (the next matching call), got {nth}")
        if when not in ("before", "after"):
            raise ValueError(f"when must be 'before' or 'after', got {when!r}")
        chosen = OPS if ops is None else frozenset(ops)
        unknown = chosen - OPS
        if unknown:
            raise ValueError(f"unknown storage operations {sorted(unknown)}; expected some of "
                             f"{sorted(OPS)}")
        return _Plan(remaining=nth, when=when, ops=chosen, match=match)

    def _call(self, op: str, path: str, run: Callable[[], T]) -> T:
        with self._mutex:
            call = Call(index=len(self.calls) + 1, op=op, path=path)
            self.calls.append(call)
            if self._dead:
                call.outcome = "refused"
                assert self.fault is not None
                raise InjectedFault(call, "before", landed=False)
            actions = self._due_hooks(op, path)
            when = self._due_fault(op, path)
        for action in actions:
            action()
        if when == "before":
            call.outcome = "injected"
            raise self._fire(call, "before", landed=False)
        try:
            result = run()
        except BaseException as exc:
            if when == "after":
                call.outcome = "injected"
                raise self._fire(call, "after", landed=False) from exc
            call.outcome = "error"
            raise
        call.landed = True
        if when == "after":
            call.outcome = "injected"
            raise self._fire(call, "after", landed=True)
        call.outcome = "ok"
        return result

    def _due_hooks(self, op: str, path: str) -> builtins.list[Callable[[], object]]:
        due: builtins.list[Callable[[], object]] = []
        for hook in self._hooks[:]:
            if hook.matches(op, path):
                hook.remaining -= 1
                if hook.remaining == 0:
                    self._hooks.remove(hook)
                    assert hook.action is not None
                    due.append(hook.action)
        return due

    def _due_fault(self, op: str, path: str) -> When | None:
        plan = self._plan
        if plan is None or not plan.matches(op, path):
            return None
        plan.remaining -= 1
        if plan.remaining:
            return None
        self._plan = None
        self._dead = plan.crash
        return plan.when

    def _fire(self, call: Call, when: When, *, landed: bool) -> InjectedFault:
        fault = InjectedFault(call, when, landed)
        self.fault = fault
        return fault


def injected(exc: BaseException | None) -> InjectedFault | None:
    """The :class:`InjectedFault` behind ``exc`` (itself, or in its cause/context chain)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, InjectedFault):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def temporary_files(root: Path) -> list[str]:
    """The local backend's temporary files (``.<name>.<pid>...tmp``) anywhere under ``root``."""
    return sorted(p.name for p in root.rglob("*") if p.name.startswith(".") and p.name.endswith(".tmp"))


class FullDisk:
    """A stand-in for ``open`` in the local backend: files opened for writing under ``root``
    fail like a full disk (ENOSPC), either at ``open`` (after the file was created, as a full
    directory table would) or at the first ``write``."""

    def __init__(self, root: Path, *, at: str) -> None:
        assert at in ("open", "write")
        self.root = str(root)
        self.at = at
        self._open = builtins.open

    def __call__(self, path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = self._open(path, mode, *args, **kwargs)
        if not {"w", "x", "a"} & set(mode) or not str(path).startswith(self.root):
            return handle
        if self.at == "open":
            handle.close()
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return _FullHandle(handle)


class _FullHandle:
    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __enter__(self) -> _FullHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()
