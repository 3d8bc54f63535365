"""Suite-wide test settings.

Tests run torch on one intra-op thread: on the 2-core CI machine tiny tensor
operations are many times slower with more threads (spin-waiting), and one
thread makes floating-point reductions reproducible across machines.
"""

import os

import pytest
from hypothesis import HealthCheck, settings

# Property-based tests (hypothesis): derandomised (the same examples on every run and
# machine), no example database, no per-example deadline (CI machines are slow); each
# test bounds its own max_examples.  HYPOTHESIS_PROFILE=explore draws fresh examples.
settings.register_profile(
    "fedspectral",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=50,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", parent=settings.get_profile("fedspectral"), derandomize=False, max_examples=500
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fedspectral"))


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _node_state_dir(tmp_path_factory, monkeypatch):
    """Each test's nodes keep their ledgers in a fresh state directory (a node's ledger
    persists across runs by default: tests must not share one)."""
    monkeypatch.setenv("FEDSPECTRAL_NODE_STATE", str(tmp_path_factory.mktemp("node-state")))
