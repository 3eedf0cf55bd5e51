"""The shared Triton plumbing: ahead-of-time compiles for a GPU target, and the missing-Triton path."""

from __future__ import annotations

import pytest
import torch

from kernels import _triton, build


@pytest.mark.skipif(_triton.triton is None, reason="triton is not installed")
def test_every_triton_kernel_compiles_for_hopper_without_a_gpu(capsys):
    assert build._compile_triton(90)
    printed = capsys.readouterr().out
    assert printed.count("sm_90 cubin") == 3


def test_without_triton_nothing_launches_and_nothing_is_available(monkeypatch):
    monkeypatch.setattr(_triton, "triton", None)
    kernel = _triton.TritonKernel(lambda: None)
    with pytest.raises(RuntimeError, match="triton is not installed"):
        kernel(interpret=True)
    with pytest.raises(RuntimeError, match="triton is not installed"):
        kernel.compile_for({}, {})
    assert not _triton.available(torch.device("cpu"))
    assert "not installed" in _triton.status()
