"""Fused kernels, each with its reference path and a parity test: C++ for the CPU, Triton for CUDA.

Build the C++ ones ahead of time with ``python -m kernels.build`` (otherwise they compile once, on
first use, into a cache keyed by their source hash).
"""
