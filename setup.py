"""Builds the C++ CPU kernels at install time (``pip install -e .``), so that a first run compiles nothing.

Everything else about the package is in pyproject.toml. The kernels are plain C-ABI shared libraries
(no torch headers, about a second each), loaded with ctypes by ``kernels._native``, which also says
which sources and flags they are built from: this file reads ``KERNELS`` there without importing the
package (the isolated build environment has setuptools, not torch). Each is ``optional``: without a
C++ compiler the install still succeeds, and the kernels are built on first use or, failing that,
their callers run the tensor path (with a warning).
"""

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

_spec = importlib.util.spec_from_file_location("_ltr_native", Path(__file__).parent / "kernels" / "_native.py")
native = sys.modules["_ltr_native"] = importlib.util.module_from_spec(_spec)  # dataclasses look it up there
_spec.loader.exec_module(native)

setup(
    ext_modules=[
        Extension(
            f"kernels.{spec.library_name}",
            sources=[f"kernels/{spec.name}.cpp"],
            language="c++",
            # -g0: Python's own CFLAGS ask for debug info, which kernels._native's builds never carry (and
            # which costs a fifth of the compile); the hash covers the flags that change the code
            extra_compile_args=[*native.BASE_CFLAGS, *spec.cflags, "-g0", native.hash_define(spec)],
            extra_link_args=list(spec.ldflags),
            optional=True,
        )
        for spec in native.KERNELS.values()
    ],
    # the kernels compile side by side (two of the three take about a second each)
    options={"build_ext": {"parallel": os.cpu_count() or 1}},
)
