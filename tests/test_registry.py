"""The framework registry is the one place a framework is declared: the folders, packaging and
tox agree with it, common/ spells no framework's name anywhere else, and a framework added to
it reaches every table derived from it."""

from __future__ import annotations

import ast
import json
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import parbench
from parbench.base.devices import gpu_count
from parbench.launch.nodes import Nodes
from parbench.run import registry
from parbench.run.registry import BACKENDS, FRAMEWORKS, LAUNCHERS

ROOT = Path(__file__).resolve().parents[1]


def framework_folders() -> set[str]:
    return {p.parent.name for p in (ROOT / "frameworks").glob("*/__init__.py")}


def test_every_framework_folder_has_a_registry_entry_and_back():
    assert framework_folders() == set(FRAMEWORKS)


def test_every_backend_module_and_launcher_exists():
    for backend in BACKENDS.values():
        package, _, name = backend.module.rpartition(".")
        assert package == f"parbench.frameworks.{backend.framework}"
        assert (ROOT / "frameworks" / backend.framework / f"{name}.py").is_file(), backend.name
        assert set(backend.launchers) <= set(LAUNCHERS)
    for framework in FRAMEWORKS.values():
        assert all(b.framework == framework.name for b in framework.backends)
        assert not framework.backends[0].parallel  # the single backend first


def tox_envs() -> set[str]:
    """Every env name tox.ini defines, with its {a,b} factors expanded."""
    names = set()
    for section in re.findall(r"^\[testenv:(.+)\]$", (ROOT / "tox.ini").read_text(), re.M):
        prefix, _, rest = section.partition("{")
        factors, _, suffix = rest.partition("}")
        names |= {f"{prefix}{f}{suffix}" for f in factors.split(",")} if rest else {section}
    return names


def test_packaging_and_tox_know_every_framework():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = project["project"]["optional-dependencies"]
    packages = project["tool"]["setuptools"]["packages"]
    independent = next(c["modules"] for c in project["tool"]["importlinter"]["contracts"]
                       if c["type"] == "independence")
    envs = tox_envs()
    for framework in FRAMEWORKS.values():
        assert f"parbench.frameworks.{framework.name}" in independent  # kept apart
        assert framework.extra in extras
        assert f"parbench.frameworks.{framework.name}" in packages
        assert f"compare-{framework.name}" in envs
        assert {b.name for b in framework.backends} <= envs
        assert any((ROOT / "tests").glob(framework.test_files[0])), "its own test file"


def code_strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant in a module except docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings]


def test_common_names_no_framework_outside_the_registry():
    names = {*FRAMEWORKS, *(name for f in FRAMEWORKS.values() for name in f.imports), "tf"}
    pattern = re.compile(rf"\b({'|'.join(sorted(names))})\b", re.I)
    found = [f"{path.name}:{line}: {text[:80]!r}"
             for path in sorted((ROOT / "common").rglob("*.py")) if path.name != "registry.py"
             for line, text in code_strings(path) if pattern.search(text)]
    assert found == []


DUMMY = """
import json
from parbench.run import registry
from parbench.run.registry import Backend, Framework

dummy = Framework("dummy", ("json",), "dummy", (
    Backend("dummy-single", "dummy", "single", "parbench.frameworks.dummy.single", ("python",),
            parallel=False),
    Backend("dummy-many", "dummy", "many", "parbench.frameworks.dummy.many", ("python",),
            parallel=True, one_process=True)),
    refusals={"compile": "dummy has no compiler"})
registry.FRAMEWORKS[dummy.name] = dummy
registry.BACKENDS.update({b.name: b for b in dummy.backends})

from parbench.base.errors import UsageError
from parbench.cli import main, parity
from parbench.launch import config
from parbench.results import records, rows, scaling

args = main.build_parser().parse_args(["compare", "--framework", "dummy"])
plan = config.resolve(config.RunConfig(backend="dummy-many", devices=2))
refused = ""
try:
    config.resolve(config.RunConfig.of(backend="dummy-single", compile=True))
except UsageError as err:
    refused = str(err)
print(json.dumps({"compare": args.framework, "parity": parity.installed_frameworks(),
                  "schema": records.SCHEMA["properties"]["framework"]["enum"],
                  "single": scaling.single_backend("dummy"), "order": rows.FRAMEWORKS[-1],
                  "world": plan.world_size, "refused": refused}))
"""


def test_a_framework_added_to_the_registry_reaches_every_derived_table():
    """Only the registry changes (in a fresh process): the CLI, config, its refusals, parity,
    the record schema and the report's order all take the new framework."""
    done = subprocess.run([sys.executable, "-c", DUMMY], capture_output=True, text=True,
                          timeout=120, check=True)
    seen = json.loads(done.stdout)
    assert seen["compare"] == "dummy" and "dummy" in seen["parity"]
    assert "dummy" in seen["schema"] and seen["single"] == "dummy-single"
    assert seen["order"] == "dummy" and seen["world"] == 2
    assert seen["refused"] == "--compile is not available for dummy-single: dummy has no compiler"


@pytest.mark.skipif(gpu_count() > 0, reason="with GPUs paddle-sharding runs (gpu_acceptance)")
def test_sharding_a_framework_cannot_do_here_is_refused_with_its_reason(tmp_path):
    done = parbench("run", "paddle-sharding", "--devices", "2", "--out", str(tmp_path / "out"))
    assert done.returncode == 2 and not (tmp_path / "out").exists()
    assert done.stderr.strip().splitlines() == [
        f"parbench: error: paddle-sharding {BACKENDS['paddle-sharding'].missing_reason()}"]
    assert "group_sharded_parallel only support gpu, xpu" in done.stderr
    listed = parbench("list").stdout.splitlines()
    assert any(line.startswith("paddle-sharding") and "unavailable: needs GPUs" in line
               for line in listed)
    # a framework with no sharded data parallelism at all says why
    assert f"tensorflow: no sharded backend: {FRAMEWORKS['tensorflow'].no_sharding}" in listed


def test_paddle_launch_is_given_node_0s_address_never_a_host_name(monkeypatch):
    """Paddle's launcher starts its rendezvous server only where --master's host equals the
    node's own address as a string: a name there left every node waiting (found on the Slurm
    cluster of tests/test_slurm_cluster.py), so the name is resolved, and node 0 is told the
    address is its own."""
    def resolve(host: str) -> str:
        if host != "node01.cluster":
            raise socket.gaierror(-2, "Name or service not known")
        return "10.0.0.1"
    monkeypatch.setattr(registry.socket, "gethostbyname", resolve)
    job = Path("JOB") / "job.json"
    launch = LAUNCHERS["paddle-launch"]
    node0, node1 = (launch.command(job, 1, Nodes(2, rank, "node01.cluster", 29500, None, 60.0))
                    for rank in (0, 1))
    assert "--master=10.0.0.1:29500" in node0 and "--master=10.0.0.1:29500" in node1
    assert "--host=10.0.0.1" in node0 and not any(a.startswith("--host=") for a in node1)
    with pytest.raises(RuntimeError, match="master host 'node02.cluster' has no IPv4 address"):
        launch.command(job, 1, Nodes(2, 1, "node02.cluster", 29500, None, 60.0))
