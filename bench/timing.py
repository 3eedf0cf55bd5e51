"""The benchmarks' one timing module: a call's seconds, repeats with warm-up and device sync (median,
best, each), CUDA-event time, and the machine line every benchmark prints."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def sync(device: torch.device | str | None) -> None:
    """Wait for ``device``'s queued work (a no-op off CUDA), so a host clock reads finished work."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """Seconds of one ``fn()`` on the host clock, and its result."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def each_seconds(
    fn: Callable[[], object], repeats: int, device: torch.device | str | None = None, *, warmup: int = 0
) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``fn()`` after ``warmup`` untimed ones, each bracketed
    by a device sync (the figure every other helper here reduces)."""
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def median_ms(fn: Callable[[], object], device: torch.device, *, repeats: int = 10, warmup: int = 5) -> float:
    """Median wall time of ``fn()`` in milliseconds, after ``warmup`` untimed calls."""
    return statistics.median(each_seconds(fn, repeats, device, warmup=warmup)) * 1e3


def median_seconds(fn: Callable[[], object], repeats: int, device: torch.device | str | None = None) -> float:
    """Median seconds of ``repeats`` calls of ``fn()``."""
    return statistics.median(each_seconds(fn, repeats, device))


def best_seconds(fn: Callable[[], object], repeats: int, device: torch.device | str | None = None) -> float:
    """Fastest of ``repeats`` calls of ``fn()`` in seconds (the least disturbed by other work)."""
    return min(each_seconds(fn, repeats, device))


def device_seconds(fn: Callable[[], object], device: torch.device, *, warmup: int = 0) -> float:
    """Seconds of one ``fn()`` after ``warmup`` untimed calls: CUDA events on a GPU (GPU time, not
    host time), else perf_counter."""
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) / 1e3
    return timed(fn)[0]


def gpu_name(device: torch.device | str = "cuda") -> str:
    return torch.cuda.get_device_name(device) if torch.cuda.is_available() else "no GPU"


def machine() -> str:
    import platform

    cpu = platform.processor() or platform.machine()
    text = f"{platform.node()} {cpu}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    if torch.cuda.is_available():
        text += f", {torch.cuda.get_device_name()}"
    return text
