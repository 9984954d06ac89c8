"""Build the optional compiled core (Cython); metadata lives in pyproject.toml.

The extensions are optional: if they cannot be compiled (no C compiler), servesim installs
and runs on the Python versions of those paths, which give identical results, more slowly.
"""

from setuptools import Extension, setup

#: The compiled modules (servesim/compiled.py says what each replaces).
COMPILED = ("engines._decode_core", "engines._sglang_batch_core", "kvcache._lru_core",
            "kvcache._segments_core", "metrics._emit_core", "perf._stretch_core", "workload._units_core")

try:
    from Cython.Build import cythonize
except ImportError:  # Cython is a build requirement; without it, no compiled core
    ext_modules = []
else:
    ext_modules = cythonize(
        # No floating-point contraction: a fused multiply-add rounds once where numpy rounds
        # twice, and the compiled paths must give numpy's results bit for bit.
        [Extension(f"servesim.{name}", [f"src/servesim/{name.replace('.', '/')}.pyx"],
                   extra_compile_args=["-ffp-contract=off"])
         for name in COMPILED],
        language_level=3,
    )
    for ext in ext_modules:  # a failed compile skips the module (cythonize drops this flag)
        ext.optional = True

setup(ext_modules=ext_modules)
