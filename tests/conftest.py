"""Suite-wide test settings.

Tests run torch on one intra-op thread: on the 2-core CI machine tiny tensor
operations are many times slower with more threads (spin-waiting), and one
thread makes floating-point reductions reproducible across machines.
"""

import pytest


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
