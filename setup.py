"""Build the optional compiled core (Cython); metadata lives in pyproject.toml.

The extensions are optional: if they cannot be compiled (no C compiler), servesim installs
and runs on the Python versions of those paths, which give identical results, more slowly.
"""

from setuptools import Extension, setup

#: The compiled modules (servesim/compiled.py says what each replaces).
COMPILED = ("engines._decode_core", "engines._sglang_batch_core", "kvcache._lazy_heap",
            "kvcache._lru_core", "kvcache._segments_core", "metrics._emit_core",
            "perf._stretch_core", "sim._event_core", "workload._units_core")
#: Modules compiled from their own Python source, typed by the .pxd beside it (compiled.py).
FROM_SOURCE = ("cluster.worker", "engines.base", "engines.sglang", "engines.trtllm", "engines.vllm",
               "kvcache.block_owner", "kvcache.hashing", "kvcache.lru_pool", "kvcache.radix_cache",
               "kvcache.token_pool", "metrics.recorder", "perf.analytic", "perf.frontend",
               "perf.plan", "sim.simulation", "workload.request", "workload.synthetic")

try:
    import numpy
    from Cython.Build import cythonize
except ImportError:  # Cython and numpy are build requirements; without them, no compiled core
    ext_modules = []
else:
    # No floating-point contraction: a fused multiply-add rounds once where numpy rounds
    # twice, and the compiled paths must give numpy's results bit for bit.  numpy's headers:
    # some cores make and read arrays through its C API (servesim/_arrays.pxd).
    def extension(name: str, suffix: str) -> Extension:
        return Extension(f"servesim.{name}", [f"src/servesim/{name.replace('.', '/')}{suffix}"],
                         include_dirs=[numpy.get_include()], extra_compile_args=["-ffp-contract=off"],
                         define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])

    ext_modules = cythonize([extension(name, ".pyx") for name in COMPILED], language_level=3)
    # A .py's annotations are documentation (``int`` may hold any Python int): only its
    # .pxd's declarations type the compiled module.  ``nonecheck``: a None where a typed
    # object is read raises, as in Python, instead of crashing.
    ext_modules += cythonize([extension(name, ".py") for name in FROM_SOURCE], language_level=3,
                             compiler_directives={"annotation_typing": False, "nonecheck": True})
    for ext in ext_modules:  # a failed compile skips the module (cythonize drops this flag)
        ext.optional = True

setup(ext_modules=ext_modules)
