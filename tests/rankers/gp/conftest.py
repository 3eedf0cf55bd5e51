"""One torch thread for the GP tests: their blocks are tiny, and on a busy 2-core machine two threads
mostly wait for each other (a 1.5 s test took 31 s with two)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
