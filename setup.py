"""Build hook: the optional C scanners (dlperf_tasks/frameworks/_c*.c).

Everything else is declared in pyproject.toml. Each C file is one extension module; ``optional=True``:
a machine without a C compiler installs the pure-Python parsers (same results, slower).
"""

from glob import glob
from pathlib import Path

from setuptools import Extension, setup

EXTENSIONS = [
    Extension(f"dlperf_tasks.frameworks.{Path(src).stem}", [src], optional=True,
              depends=sorted(glob("dlperf_tasks/frameworks/_c*.h")),  # _cnum.h: shared by the scanners
              extra_compile_args=["-O2", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"])
    for src in sorted(glob("dlperf_tasks/frameworks/_c*.c"))
]

setup(ext_modules=EXTENSIONS)
