"""Fixtures and settings every test directory shares.

* **One dataset per test run.** ``cache_dir`` is the session's dataset cache and ``load_dataset``
  loads a run spec's data section once and keeps it, so the corpus is tokenized once however many
  directories, specs and processes use it. ``dataset`` is the one of :func:`suite_env.small_spec`.
  ``veriloco_home`` is a fresh ``VERILOCO_HOME`` whose cache already holds it, for the CLI and the
  processes a test starts.
* **Threads.** Every test runs under the settings hosts and validators use
  (``trainer.determinism.configure``) with one torch thread; ``threads`` sets another count inside
  one test.
* **Two workers.** ``make test`` runs the suite on pytest-xdist workers (``-n auto --dist
  loadfile --no-loadscope-reorder``): every module goes whole to some worker, so module fixtures
  are built once; the modules with slow tests go out first, then the rest
  (``pytest_collection_modifyitems``). A worker that meets a devnet test starts its own devnet.
* **Hypothesis profiles.** ``dev`` (the default) runs few examples for quick local runs; ``ci`` is
  the thorough run, which ``make test`` (and so CI) selects with ``--hypothesis-profile=ci``.

Plain values (the small spec, named keys) are in ``suite_env.py``, importable by name.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from suite_env import HOST, SESSION_DEVNET, small_spec, uses_session_devnet

from protocol.rules.spec import DataSpec, RunSpec

# -- hypothesis -------------------------------------------------------------------------------
# deadline=None in both: a deadline is a timing assertion, and on a busy machine a slow example is
# not a failure. The contract's state machine runs a fraction of max_examples (each of its examples
# is a whole run of up to stateful_step_count transactions): 5 runs of 40 steps in dev (about 3 s),
# 25 runs of 80 steps in ci (about 20 s alone, tests/chain/test_contract_properties.py).
settings.register_profile("dev", max_examples=20, stateful_step_count=40, deadline=None)
settings.register_profile("ci", max_examples=100, stateful_step_count=80, deadline=None, print_blob=True)
settings.load_profile("dev")  # --hypothesis-profile=ci overrides it (the plugin loads it after conftest)


# -- data -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's dataset cache (tokenized splits by dataset hash), shared by every test and
    every process the tests start (pass it on as ``cache_dir`` or through ``veriloco_home``)."""
    return tmp_path_factory.mktemp("dataset-cache")


@pytest.fixture(scope="session")
def load_dataset(cache_dir: Path) -> Callable[[DataSpec], object]:
    """``load_dataset(spec.data) -> Dataset``, built once per data section and kept for the session
    (a Dataset is never written to, so sharing it is safe)."""
    from trainer.data import Dataset

    loaded: dict[DataSpec, Dataset] = {}

    def load(data: DataSpec) -> Dataset:
        if data not in loaded:
            loaded[data] = Dataset.load(data, cache_dir)
        return loaded[data]

    return load


@pytest.fixture(scope="session")
def dataset(load_dataset):
    """The dataset of :func:`suite_env.small_spec` (and of every spec made from the tiny preset)."""
    return load_dataset(small_spec().data)


@pytest.fixture
def veriloco_home(tmp_path: Path, dataset, cache_dir: Path) -> Path:
    """A fresh ``VERILOCO_HOME`` whose dataset cache already holds the session's tokenized corpus,
    so the CLI and the nodes a test starts read it instead of tokenizing it again."""
    home = tmp_path / "home"
    shutil.copytree(cache_dir, home / "cache")
    return home


@pytest.fixture(scope="session")
def spec() -> RunSpec:
    """:func:`suite_env.small_spec` (run specs are immutable)."""
    return small_spec()


@pytest.fixture
def ctx(spec: RunSpec):
    """Epoch 0 of ``HOST`` in ``spec``, from the genesis seed."""
    from protocol.rules.beacon import genesis_seed
    from trainer.inner import EpochContext

    run_id = spec.run_id()
    return EpochContext(run_id, 0, HOST, genesis_seed(run_id))


# -- threads ----------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def determinism() -> Iterator[None]:
    """Every test runs under the determinism settings of hosts and validators with one torch thread.

    The step is thread-invariant (replays are bitwise equal at any thread count); one thread is the
    fast choice on a busy 2-core machine, where the processes the tests start run too. Tests about
    other thread counts set them with ``threads``. A run of torch-free tests (protocol rules, the chain)
    does not import torch for this: every test module that uses torch imported it at collection.
    """
    if "torch" not in sys.modules:
        yield
        return
    import torch

    from trainer.determinism import configure

    old = torch.get_num_threads()
    # On a GPU machine the CUDA settings too (cuBLAS's fixed workspace must precede its first use).
    configure(threads=1, device="cuda" if torch.cuda.is_available() else "cpu")
    yield
    torch.set_num_threads(old)


@pytest.fixture
def threads() -> Iterator[Callable[[int], None]]:
    """``threads(n)`` sets torch's thread count inside a test; the suite's count is restored after."""
    import torch

    old = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(old)


# -- workers ----------------------------------------------------------------------------------


# Each test's position in the run and the last position of a test that may use the session devnet.
_DEVNET_USES = pytest.StashKey[tuple[dict[str, int], int]]()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop this process's session devnet as soon as no later test can use it, instead of at the
    end of the session: it makes a block every 100 ms whether a test waits for it or not.

    A test may use it if it asks for it (:func:`suite_env.uses_session_devnet`) or is marked
    ``devnet``. A worker runs its tests in the order of ``items`` (below), so when the next test
    comes after the last one that may use the devnet, no test of this process will.
    """
    net = item.config.stash.get(SESSION_DEVNET, None)
    if net is None or nextitem is None:  # none running, or the session ends and its fixture stops it
        return
    if _DEVNET_USES not in item.config.stash:
        items = item.session.items
        users = [i for i, it in enumerate(items) if uses_session_devnet(it) or it.get_closest_marker("devnet")]
        item.config.stash[_DEVNET_USES] = ({it.nodeid: i for i, it in enumerate(items)}, max(users, default=-1))
    positions, last = item.config.stash[_DEVNET_USES]
    if positions.get(nextitem.nodeid, -1) > last:
        net.stop()
        del item.config.stash[SESSION_DEVNET]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the tests for ``make test``'s pytest-xdist run (``-n auto --dist loadfile
    --no-loadscope-reorder``); a run without ``-n`` keeps pytest's order.

    ``loadfile`` sends every module whole to one worker, so module-scoped fixtures (trained states,
    servers) are built once, and hands the modules out in the order the workers collected them:

    1. the modules with devnet tests that start devnets of their own (the multi-process networks,
       the operators' walkthrough, the CLI's and the keyring's devnets): the longest tests, first;
    2. the modules that use the session's devnet (the contract's tests on the devnet backend), one
       after the other, so that a worker's session devnet lives only while they run: once no later
       module uses it, ``tests/chain/conftest.py`` stops it (at 100 ms blocks an idle node burns
       0.12 to 0.16 of a core, 16 ms of CPU a block);
    3. the other modules with ``slow`` tests (the contract's builds, the long properties, the
       in-process networks);
    4. the rest in collection order, whose many short modules even the workers out at the end
       instead of a long test forming the run's tail.

    Each worker that meets a devnet test starts its own session devnet (on free ports, in its own
    temporary directory), so the devnet tests of both workers overlap their waits for blocks with
    the other worker's computing. (``--dist loadgroup`` would read ``xdist_group`` marks, but
    pytest 9 ignores the node ids pytest-xdist 3.8 rewrites for it, pytest-xdist issue 1386, and
    every test then went to a worker on its own, module fixtures built twice.)
    """
    if not hasattr(config, "workerinput"):  # not an xdist worker: nothing to hand out
        return

    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    session_devnet = {module(item) for item in items if uses_session_devnet(item)}
    own_devnet = {module(item) for item in items if item.get_closest_marker("devnet")} - session_devnet
    slow = {module(item) for item in items if item.get_closest_marker("slow")}

    def group(item: pytest.Item) -> int:
        name = module(item)
        return 0 if name in own_devnet else 1 if name in session_devnet else 2 if name in slow else 3

    items.sort(key=group)  # a stable sort: modules keep their collection order within a group, tests theirs
