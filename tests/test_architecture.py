"""The architecture is a rule, not a picture: the import contracts in pyproject.toml (layers of
common/, frameworks/ on the contract and the run-facing API only, no framework in common/, the
frameworks independent, no import cycle anywhere) hold, and each of them fails on the kind of
import it exists to forbid."""

from __future__ import annotations

import subprocess
import sys
from copy import deepcopy
from pathlib import Path

import grimp
import pytest
from importlinter.api import read_configuration
from importlinter.contracts.acyclic_siblings import AcyclicSiblingsContract
from importlinter.contracts.forbidden import ForbiddenContract
from importlinter.contracts.independence import IndependenceContract
from importlinter.contracts.layers import LayersContract

ROOT = Path(__file__).resolve().parents[1]
CONFIG = read_configuration(str(ROOT / "pyproject.toml"))
SESSION = CONFIG["session_options"]
CONTRACTS = {options["name"]: options for options in CONFIG["contracts_options"]}
TYPES = {"layers": LayersContract, "forbidden": ForbiddenContract,
         "independence": IndependenceContract, "acyclic_siblings": AcyclicSiblingsContract}


def test_lint_imports_passes():
    """What CI and a developer run: every contract kept."""
    done = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*SESSION["root_packages"], include_external_packages=True,
                             cache_dir=None)


def _kept(name: str, graph: grimp.ImportGraph) -> bool:
    options = CONTRACTS[name]
    contract = TYPES[options["type"]](name=name, session_options=SESSION,
                                      contract_options=options)
    return contract.check(deepcopy(graph), verbose=False).kept


# (contract, an import that breaks it): one breach per contract, each an import someone could
# plausibly write
BREACHES = [
    ("common/ is layered: each layer imports only the layers below it",
     ("parbench.results.report", "parbench.launch.config")),
    ("frameworks/ use only the contract, the run-facing API and base",
     ("parbench.frameworks.torch.ddp", "parbench.launch.harness")),
    ("common/ imports no framework (each is imported only in its own worker process)",
     ("parbench.run.loop", "jax")),
    ("the frameworks are independent of each other",
     ("parbench.frameworks.paddle.model", "parbench.frameworks.torch.model")),
    ("no import cycles, in common/ and in every framework folder",
     ("parbench.contract.spec", "parbench.contract.weights")),
]


def test_every_contract_is_named_here():
    assert {name for name, _ in BREACHES} == set(CONTRACTS)


@pytest.mark.parametrize("name,breach", BREACHES, ids=[b[0][:40] for b in BREACHES])
def test_each_contract_catches_its_breach(name, breach, graph):
    assert _kept(name, graph)
    broken = deepcopy(graph)
    importer, imported = breach
    assert importer in broken.modules
    broken.add_import(importer=importer, imported=imported)
    assert not _kept(name, broken)
