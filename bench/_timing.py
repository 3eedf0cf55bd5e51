"""Timing helpers shared by the benchmarks: warm-up, median of repeats, device sync."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ms(fn: Callable[[], object], device: torch.device, *, repeats: int = 10, warmup: int = 5) -> float:
    """Median wall time of ``fn()`` in milliseconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def device_seconds(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds of one ``fn()``: CUDA events on a GPU (GPU time, not host time), else perf_counter."""
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


def gpu_name(device: torch.device | str = "cuda") -> str:
    return torch.cuda.get_device_name(device) if torch.cuda.is_available() else "no GPU"


def machine() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    text = f"{platform.node()} {cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    if torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text
