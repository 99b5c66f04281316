"""``tox -e mutation`` must work on a fresh clone: its env installs parbench's dependencies by
hand (parbench itself is not installed: the tests import mutmut's mutated copy), so a package
the core or a selected test imports that the env lacks stops the run at test collection, as
scipy once did. And a mutated module no selected test reaches gives mutants nothing can kill.
Both are read from the files here, without building that env."""

from __future__ import annotations

import ast
import configparser
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTMUT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
# parbench, and the test and benchmark modules tests import by path
FIRST_PARTY = {"parbench", *(p.stem for folder in ("tests", "benchmarks")
                             for p in (ROOT / folder).glob("*.py"))}
FRAMEWORKS = {"torch", "tensorflow", "keras", "tf_keras", "paddle", "jax", "jaxlib", "flax",
              "optax"}


def _imports(path: Path, top_level_only: bool) -> set[str]:
    """Dotted names ``path`` imports (relative imports resolved against its package)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else ast.walk(tree)
    package = _module_of(path).rsplit(".", 1)[0] if path.is_relative_to(ROOT / "common") \
        else ""
    found = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            found |= {f"{base}.{alias.name}" for alias in node.names} | {base}
    return found


def _module_of(path: Path) -> str:
    """parbench's name of a file under common/ (common/ installs as ``parbench``)."""
    relative = path.relative_to(ROOT / "common").with_suffix("")
    return ".".join(("parbench", *relative.parts)).removesuffix(".__init__")


def _third_party(names: set[str]) -> set[str]:
    tops = {name.split(".")[0] for name in names if name}
    return {top for top in tops if top not in sys.stdlib_module_names
            and top not in FIRST_PARTY | FRAMEWORKS}


def _mutation_deps() -> set[str]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    lines = tox["testenv:mutation"]["deps"].split()
    return {re.split(r"[<>=!~\[]", line)[0].lower().replace("_", "-") for line in lines}


def _selected_tests() -> list[Path]:
    return [ROOT / name for name in MUTMUT["pytest_add_cli_args_test_selection"]]


def _missing(deps: set[str]) -> dict[str, set[str]]:
    """Packages the core or a selected test imports that ``deps`` lack (module -> the
    distributions that provide it); the frameworks aside: the tests that need one skip without
    it (conftest.needs), and the mutated modules import none."""
    core = set().union(*(_imports(p, top_level_only=False)
                         for p in (ROOT / "common").rglob("*.py")))
    tests = set().union(*(_imports(p, top_level_only=False)
                          for p in [*_selected_tests(), ROOT / "tests" / "conftest.py"]))
    distributions = packages_distributions()
    wanted = {module: {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
              for module in _third_party(core | tests)}
    return {module: names for module, names in wanted.items() if not names & deps}


def _unreached(selected: list[Path]) -> set[str]:
    """The mutated modules that no file of ``selected`` imports, directly or through the
    parbench modules it imports."""
    modules = {_module_of(p): p for p in (ROOT / "common").rglob("*.py")}
    reached: set[str] = set()
    todo = [name for test in selected for name in _imports(test, False)]
    while todo:
        name = todo.pop()
        if name in modules and name not in reached:
            reached.add(name)
            todo += _imports(modules[name], top_level_only=False)
    mutated = {"parbench." + path.removeprefix("parbench/").removesuffix(".py").replace("/", ".")
               for path in MUTMUT["only_mutate"]}
    assert mutated <= set(modules), f"no such module: {mutated - set(modules)}"
    return mutated - reached


def test_the_mutation_env_installs_what_the_core_and_the_selected_tests_import():
    assert not _missing(_mutation_deps()), "tox.ini [testenv:mutation] deps lack some"


def test_every_mutated_module_is_reached_by_a_selected_test():
    assert not _unreached(_selected_tests())


def test_the_checks_see_a_missing_package_and_an_unreached_module():
    """Not vacuous: without scipy in the env (the fresh-clone failure of the last round) the
    first check names it, and a selection of the contract tests alone leaves the report's
    modules unreached."""
    assert "scipy" in _missing(_mutation_deps() - {"scipy"})
    assert {"parbench.results.intervals", "parbench.results.headline"} <= \
        _unreached([ROOT / "tests" / "test_contract.py"])
