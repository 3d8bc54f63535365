"""One torch thread per test: on a shared 2-core machine, torch's intra-op
threads spin against other processes and small ops become 10-20x slower."""

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
