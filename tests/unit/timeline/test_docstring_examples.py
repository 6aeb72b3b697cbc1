"""The examples in the docstrings of ``timeline`` and ``indexes`` run, imported by the names metatxn
installs them under.

pytest's ``--doctest-modules`` imports a file by the folder it is in (``timeline/_local.py`` as
``timeline._local``), which for a package installed under another name would load a second copy
of it beside the one the code uses; these modules are imported by name instead.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

from metatxn import indexes, timeline

MODULES = sorted(info.name for package in (timeline, indexes)
                 for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."))


@pytest.mark.parametrize("name", [timeline.__name__, indexes.__name__, *MODULES])
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    # As pytest runs them (its doctest_optionflags default), each module in a namespace of its own.
    failed, _ = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False, verbose=False)
    assert failed == 0, f"{name}: {failed} docstring example(s) failed (printed above)"
