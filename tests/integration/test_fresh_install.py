"""What a user of the core gets: metatxn's wheel installed alone (``pip install metatxn``, no
extra) into a new virtual environment of the oldest and of the newest Python found here writes a
table, reads it back and travels in time, and its command line reads it, without PySpark.

The wheel is built once from a copy of the checkout; the environments of the two interpreters
install it at the same time (pip's cache makes that seconds after the first run). What Spark needs
(``metatxn[spark]``) is proven by ``make demo`` on a clean checkout, which installs that extra and
nothing more; here ``import txn.spark`` and ``metatxn demo`` must name it instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
#: The Python versions metatxn declares (pyproject's classifiers).
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
#: How long one environment may take to install (the first run downloads pyarrow and numpy).
INSTALL_TIMEOUT = 900


def _interpreters() -> dict[str, str]:
    """The oldest and the newest supported Python found, by version: ``pythonX.Y`` on PATH or
    under pyenv's versions; the one running the suite is always a candidate, so there is at
    least one."""
    found = {f"{sys.version_info.major}.{sys.version_info.minor}": sys.executable}
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for version in SUPPORTED:
        if version in found:
            continue
        # PATH first (pyenv's shims are there too, but a shim of an uninstalled version fails:
        # the versions folder is checked instead).
        on_path = shutil.which(f"python{version}")
        if on_path and ".pyenv/shims" not in on_path:
            found[version] = on_path
            continue
        installed = sorted((str(p) for p in pyenv.glob(f"{version}.*/bin/python{version}")),
                           key=_release, reverse=True)
        if installed:
            found[version] = installed[0]
    versions = sorted(found, key=_release)
    return {version: found[version] for version in {versions[0], versions[-1]}}


def _release(text: str) -> tuple[int, ...]:
    """``3.10`` or ``.../versions/3.10.13/bin/python3.10`` as ``(3, 10)`` or ``(3, 10, 13)``."""
    match = re.search(r"\d+\.\d+(\.\d+)?", text.split("/bin/")[0].rsplit("/", 1)[-1])
    assert match, text
    return tuple(int(part) for part in match.group(0).split("."))


INTERPRETERS = _interpreters()
VERSIONS = sorted(INTERPRETERS, key=_release)
_BEFORE_RENAME = pytest.mark.xfail(strict=True, reason="timeline and indexes are still top-level")

#: A write and a read, as a user of the Python API alone would: create a partitioned keyed table,
#: append, upsert, read the latest snapshot and the first one (time travel).
_JOB = r"""
import importlib.util, json, sys
import pyarrow as pa
import txn

uri = sys.argv[1]
schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("price", pa.float64())])
t = txn.create_table(uri, schema, partition_by=["region"], record_key="id")
first = t.append(pa.table({"id": [1, 2, 3], "region": ["eu", "us", "eu"], "price": [1.0, 2.0, 3.0]}))
second = t.upsert(pa.table({"id": [3, 4], "region": ["eu", "us"], "price": [30.0, 4.0]}))
now = txn.open_table(uri).snapshot().to_arrow().sort_by("id").to_pydict()
then = t.snapshot(first.instant).to_arrow().sort_by("id").to_pydict()
spark = None
try:
    import txn.spark
except ImportError as missing:
    spark = [type(missing).__name__, str(missing)]
print(json.dumps({
    "python": list(sys.version_info[:2]), "now": now, "then": then,
    "commits": [first.operation, second.operation, second.rows_deleted],
    "statuses": [str(s.status) for s in t.segments()], "spark": spark,
    "installed": [m for m in ("pyspark", "sqlglot", "pandas") if importlib.util.find_spec(m)],
    "imported": sorted({m.split(".")[0] for m in sys.modules} & {"pyspark", "sqlglot", "rich"}),
}))
"""

#: What a script's folder may hold that must not shadow metatxn's own packages.
_SHADOWS = {
    "timeline.py": "raise RuntimeError('the user timeline.py was imported')\n",
    "indexes/__init__.py": "raise RuntimeError('the user indexes/ was imported')\n",
}


def _run(command: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # Without PYTHONPATH: a checkout on it would be imported instead of the installed wheel.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, cwd=cwd,
                          env=env)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A copy of the source tree: setuptools builds in the folder it is given, and a build/ left
    # in the checkout by an older build could ship modules that no longer exist.
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "warehouse", ".*_cache", ".hypothesis",
        "__pycache__", "bench", "tests", "design"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(base / "dist"),
                  str(source)])
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (base / "dist").glob("metatxn-*.whl")
    return wheel


@pytest.fixture(scope="module")
def environments(wheel: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[dict[str, Future[tuple[Path, float]]]]:
    """A new environment per interpreter with the wheel installed, all installing at once."""
    def install(version: str, interpreter: str) -> tuple[Path, float]:
        started = time.perf_counter()
        venv = tmp_path_factory.mktemp(f"venv{version}")
        # Without pip of its own: this pip installs into it (``--python``), which saves
        # bootstrapping one per environment.
        made = _run([interpreter, "-m", "venv", "--without-pip", str(venv)])
        assert made.returncode == 0, made.stderr[-3000:]
        python = venv / "bin" / "python"
        done = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                     "--no-compile", str(wheel)])
        assert done.returncode == 0, done.stderr[-3000:]
        return python, time.perf_counter() - started

    with ThreadPoolExecutor(len(INTERPRETERS)) as pool:
        yield {version: pool.submit(install, version, interpreter)
               for version, interpreter in INTERPRETERS.items()}


def test_the_wheel_ships_metatxn_alone(wheel: Path) -> None:
    """The wheel's top-level import names are ``txn`` and ``metatxn`` only, and it holds every
    module of the checkout (pyproject lists the packages)."""
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist() if ".dist-info/" not in name}
        shipped = {name for name in archive.namelist() if name.endswith(".py")}
        metadata = next(archive.read(n).decode() for n in archive.namelist()
                        if n.endswith(".dist-info/METADATA"))
    assert tops == {"txn", "metatxn"}
    modules = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("txn/**/*.py")}
    modules |= {f"metatxn/{p.relative_to(ROOT).as_posix()}" for folder in ("timeline", "indexes")
                for p in (ROOT / folder).glob("**/*.py")}
    assert shipped == modules
    requires = {line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line}
    assert not {r for r in requires if re.match(r"(pyspark|sqlglot|s3fs|obstore)\b", r)}, requires


@pytest.mark.parametrize("version", VERSIONS)
def test_the_core_writes_and_reads_without_spark(
        version: str, environments: dict[str, Future[tuple[Path, float]]], tmp_path: Path) -> None:
    python, seconds = environments[version].result()
    print(f"Python {version}: a new environment with the wheel in {seconds:.1f} s")
    uri = str(tmp_path / "orders")
    job = _run([str(python), "-c", _JOB, uri], cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    report = json.loads(job.stdout.strip().splitlines()[-1])
    assert report["python"] == [int(part) for part in version.split(".")]
    assert report["now"] == {"id": [1, 2, 3, 4], "region": ["eu", "us", "eu", "us"],
                             "price": [1.0, 2.0, 30.0, 4.0]}
    assert report["then"] == {"id": [1, 2, 3], "region": ["eu", "us", "eu"], "price": [1.0, 2.0, 3.0]}
    assert report["commits"] == ["append", "upsert", 1]
    assert report["statuses"] == ["Success", "Success"]
    # Nothing of Spark installed, pandas neither (no core dependency brings it), and `import
    # txn` and its writes and reads import no part of Spark nor the command line's rich.
    assert report["installed"] == []
    assert report["imported"] == []
    kind, message = report["spark"]
    assert kind == "ModuleNotFoundError"
    assert "txn.spark needs pyspark" in message and "pip install 'metatxn[spark]'" in message

    cli = python.parent / "metatxn"
    assert _run([str(cli), "--help"]).returncode == 0
    timeline = _run([str(cli), "timeline", uri, "--json"])
    assert timeline.returncode == 0, timeline.stderr
    assert [i["operation"] for i in json.loads(timeline.stdout)] == ["append", "upsert"]
    demo = _run([str(cli), "demo", "--warehouse", str(tmp_path / "warehouse")])
    assert demo.returncode == 1
    assert demo.stderr.splitlines() == [
        "metatxn: error: txn.spark needs pyspark, which is not installed (metatxn's core leaves Spark out)",
        "metatxn: help: install the extra: pip install 'metatxn[spark]'"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_users_timeline_module_cannot_break_import_txn(
        version: str, environments: dict[str, Future[tuple[Path, float]]], tmp_path: Path) -> None:
    """A ``timeline.py`` and an ``indexes/`` package next to the user's script (the first entry
    of ``sys.path``) are the user's: ``import txn`` uses metatxn's own."""
    python, _ = environments[version].result()
    for name, text in _SHADOWS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    job = _run([str(python), str(script), str(tmp_path / "orders")], cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    assert json.loads(job.stdout.strip().splitlines()[-1])["statuses"] == ["Success", "Success"]
    # And the user's modules are still theirs to import.
    theirs = _run([str(python), "-c", "import timeline"], cwd=tmp_path)
    assert "the user timeline.py was imported" in theirs.stderr
