"""Build the optional compiled core (Cython); metadata lives in pyproject.toml.

The extension is optional: if it cannot be compiled (no C compiler), servesim installs
and runs on its pure-Python block pool, which gives identical results, more slowly.
"""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # Cython is a build requirement; without it, no compiled core
    ext_modules = []
else:
    ext_modules = cythonize(
        [Extension("servesim.kvcache._lru_core", ["src/servesim/kvcache/_lru_core.pyx"], optional=True)],
        language_level=3,
    )

setup(ext_modules=ext_modules)
