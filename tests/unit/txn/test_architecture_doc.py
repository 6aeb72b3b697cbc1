"""design/architecture.md names the code as it is: every module, no module that is gone, the
rooms' imports exactly as ``ALLOWED`` has them, and links that lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.txn.test_architecture import ALLOWED

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "design" / "architecture.md"

#: A path of the repository as the doc writes it: ``txn/_commit/_writes/_base.py``,
#: ``txn/_twophase/``. Not when it continues a longer name (``_metadata/_timeline/``).
_PATH = re.compile(r"(?<![\w./])((?:txn|timeline|indexes|tests)/[\w./]*[\w/])")
_LINK = re.compile(r"\]\(([\w.-]+\.md)?(?:#([\w-]+))?\)")
_ROOM_ROW = re.compile(r"^\| `txn/(_?\w+)/` \| ([^|]*) \|", re.MULTILINE)
_LAYER = re.compile(r"^ layer (\d+) (.*)$", re.MULTILINE)


def _modules() -> set[str]:
    found = [*ROOT.glob("txn/**/*.py"), *ROOT.glob("timeline/*.py"), *ROOT.glob("indexes/*.py")]
    return {p.relative_to(ROOT).as_posix() for p in found}


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_module_is_named_with_its_full_path() -> None:
    text = DOC.read_text()
    missing = sorted(m for m in _modules() if f"`{m}`" not in text)
    assert not missing, f"design/architecture.md does not name {missing}"


def test_every_path_it_names_exists() -> None:
    gone = sorted({p for p in _PATH.findall(DOC.read_text()) if not (ROOT / p).exists()})
    assert not gone, f"design/architecture.md names paths that do not exist: {gone}"


def test_its_table_of_rooms_is_allowed() -> None:
    """The 'may import' table says what ``ALLOWED`` says, room by room."""
    text = DOC.read_text()
    documented = {room: set(re.findall(r"`(\w+)`", cell)) for room, cell in _ROOM_ROW.findall(text)}
    assert documented.keys() == ALLOWED.keys(), "rooms in the doc's table differ from ALLOWED"
    for room, rooms in ALLOWED.items():
        said = sorted(documented[room])
        assert documented[room] == rooms, f"{room}: the doc says {said}, ALLOWED {sorted(rooms)}"


def test_its_layers_put_every_import_below() -> None:
    """Each room drawn in a layer imports only rooms drawn in lower layers."""
    layer = {room: int(n) for n, line in _LAYER.findall(DOC.read_text())
             for room in re.findall(r"(?<![\w/])(_[a-z]+)\b", line)}
    assert set(layer) == set(ALLOWED) - {"_cli", "spark"}, "every room but _cli and spark has a layer"
    for room, n in layer.items():
        above = sorted(r for r in ALLOWED[room] if layer[r] >= n)
        assert not above, f"{room} (layer {n}) may import {above}, drawn at its layer or above"


def test_its_links_lead_to_a_heading() -> None:
    text = DOC.read_text()
    for target, anchor in _LINK.findall(text):
        page = DOC.parent / target if target else DOC
        assert page.exists(), f"link to {target}: no such page"
        if anchor:
            anchors = {_anchor(h) for h in re.findall(r"^#+ (.*)$", page.read_text(), re.MULTILINE)}
            assert anchor in anchors, f"link to {target}#{anchor}: no such heading"
