"""Fused kernels, each with its reference path and a parity test: C++ for the CPU, Triton for CUDA.

``pip install -e .`` builds the C++ ones (``setup.py``); a checkout used without installing builds
them once, on first use, into a cache keyed by their source hash (``kernels._native``).
``python -m kernels.build`` says where each comes from.
"""
