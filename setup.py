"""Build the optional compiled core (Cython); metadata lives in pyproject.toml.

The extensions are optional: if they cannot be compiled (no C compiler), servesim installs
and runs on the Python versions of those paths, which give identical results, more slowly.

Which modules are compiled is listed once, in ``src/servesim/compiled_parts.py`` (read here
without importing servesim).  The build compiles them in parallel (one job per CPU), says
which module it is on, and keeps each built module in ``build/servesim-ext-cache/`` under
the hash of its generated C source and compiler settings: a second install (say, the test
extras after the plain install) copies them instead of compiling again.  Cython's own
staleness test compares file times, and each install's fresh build environment has newer
numpy headers than the C already generated: a stamp of what each module was translated from
(:func:`translate`) lets that second install skip Cython too.
"""

import hashlib
import os
import re
import runpy
import shutil
import sys
import threading
import time
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
PARTS = runpy.run_path(str(ROOT / "src" / "servesim" / "compiled_parts.py"))
#: Cython modules that replace a Python reference kept beside them.
COMPILED = PARTS["CORES"]
#: Modules compiled from their own Python source, typed by the .pxd beside it.
FROM_SOURCE = PARTS["FROM_SOURCE"]
#: A path into a Python environment's packages (pip's temporary build environments differ by it).
_ENV_PATH = re.compile(rb"/[^\s\"'<>]*?/site-packages/")
#: Built modules, by the hash of what produced them (see :class:`CachedBuildExt`).
CACHE = ROOT / "build" / "servesim-ext-cache"
#: What each module's generated C was translated from (see :func:`translate`).
STAMPS = ROOT / "build" / "servesim-cython-stamps"
#: ``-ffp-contract=off``: no fused multiply-adds, so compiled and Python versions round alike.
#: ``-g0``: no debug information (Python's own CFLAGS ask for ``-g``); it changes nothing a run
#: computes and cuts a module's compile time by about a quarter (vLLM's scheduler: 22 s -> 17 s
#: of CPU on this project's 2-core machine).
COMPILE_ARGS = ["-ffp-contract=off", "-g0"]
#: The modules compiled from their own ``.py`` are built at ``-O1`` instead of Python's ``-O3``:
#: half the compile time (all of them: 187 s -> 91 s of CPU here), and no time a run spends
#: (``perf`` over the 256-play agentic vLLM run: 27.7 s of samples at ``-O1``, 28.3 s at
#: ``-O3``; their code is mostly calls into CPython, which ``-O3`` cannot make faster).  The
#: ``.pyx`` cores are tight C loops over arrays and keep ``-O3``.
FROM_SOURCE_ARGS = ["-O1"]


def _say(message: str) -> None:
    """Progress of a long build: to the build log (``pip install -v`` shows it) and, when the
    install runs on a terminal, to the terminal, since pip hides a build's output otherwise."""
    line = f"servesim: {message}"
    print(line, flush=True)
    try:
        with open("/dev/tty", "w") as tty:
            tty.write(line + "\n")
    except OSError:
        pass


class CachedBuildExt(build_ext):
    """build_ext that compiles in parallel, reports progress and reuses identical builds."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1
        # The cache decides what to reuse: without ``force``, build_ext would keep a module
        # whose file is newer than its C even when the settings changed, and the cache would
        # store that old build under the new settings' key.
        self.force = True
        self._lock = threading.Lock()
        self._done = 0
        self._start = time.monotonic()

    def _key(self, ext: Extension) -> str:
        """The hash of the module's generated C source, compiler settings and Python ABI.

        pip builds each install in a fresh temporary environment, whose path appears in the C
        source (Cython names the ``.pxd`` files it read) and in numpy's include folder: paths up
        to ``site-packages/`` are left out of the key, numpy's version stands for its headers."""
        digest = hashlib.sha256()
        for source in ext.sources:
            digest.update(_ENV_PATH.sub(b"<site-packages>/", Path(source).read_bytes()))
        includes = [_ENV_PATH.sub(b"<site-packages>/", d.encode()).decode() for d in ext.include_dirs]
        settings = (ext.name, ext.extra_compile_args, ext.define_macros, includes, sys.version,
                    numpy.__version__, self.compiler.compiler_so if hasattr(self.compiler, "compiler_so") else "")
        digest.update(repr(settings).encode())
        return digest.hexdigest()[:24]

    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name))
        cached = CACHE / f"{ext.name}-{self._key(ext)}{target.suffix}"
        if cached.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cached, target)
            self._progress(ext, "reused")
            return
        self._progress(ext, "compiling", before=True)
        super().build_extension(ext)
        if target.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            partial = cached.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            shutil.copyfile(target, partial)
            os.replace(partial, cached)
        self._progress(ext, "compiled")

    def _progress(self, ext: Extension, what: str, before: bool = False) -> None:
        with self._lock:
            if not before:
                self._done += 1
            n = len(self.extensions)
            elapsed = time.monotonic() - self._start
            _say(f"{what} {ext.name} ({self._done}/{n} done, {elapsed:.0f} s)")


try:
    import Cython
    import numpy
    from Cython.Build import cythonize
except ImportError:  # Cython and numpy are build requirements; without them, no compiled core
    ext_modules = []
else:
    # No floating-point contraction: a fused multiply-add rounds once where numpy rounds
    # twice, and the compiled paths must give numpy's results bit for bit.  numpy's headers:
    # some cores make and read arrays through its C API (servesim/_arrays.pxd).
    def extension(name: str, suffix: str, args: list[str]) -> Extension:
        return Extension(f"servesim.{name}", [f"src/servesim/{name.replace('.', '/')}{suffix}"],
                         include_dirs=[numpy.get_include()], extra_compile_args=COMPILE_ARGS + args,
                         define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")])

    def translation_stamp(ext: Extension, directives: dict) -> str:
        """What the module's C is generated from: its source, every servesim ``.pxd`` (a change
        to any may change it), Cython's and numpy's versions (numpy's ``.pxd`` files come with
        its version) and the directives."""
        digest = hashlib.sha256(repr((Cython.__version__, numpy.__version__, sorted(directives.items()))).encode())
        for path in [Path(ext.sources[0]), *sorted((ROOT / "src" / "servesim").rglob("*.pxd"))]:
            digest.update(path.as_posix().encode() + b"\0" + path.read_bytes())
        return digest.hexdigest()

    def translate(extensions: list[Extension], directives: dict) -> list[Extension]:
        """Cythonize the modules whose stamp changed; the others keep their generated C."""
        nthreads = os.cpu_count() or 1
        stamps = {ext.name: translation_stamp(ext, directives) for ext in extensions}
        stale = []
        for ext in extensions:
            c_file = Path(ext.sources[0]).with_suffix(".c")
            stamp_file = STAMPS / ext.name
            if c_file.exists() and stamp_file.exists() and stamp_file.read_text() == stamps[ext.name]:
                ext.sources = [str(c_file)]
            else:
                stale.append(ext)
        if stale:
            translated = {ext.name: ext for ext in cythonize(stale, language_level=3, nthreads=nthreads, quiet=True,
                                                             force=True, compiler_directives=directives)}
            STAMPS.mkdir(parents=True, exist_ok=True)
            for name in translated:
                (STAMPS / name).write_text(stamps[name])
            extensions = [translated.get(ext.name, ext) for ext in extensions]
        return extensions

    if any(arg.startswith(("build", "develop", "editable", "bdist", "install")) for arg in sys.argv[1:]):
        _say(f"translating {len(COMPILED) + len(FROM_SOURCE)} modules with Cython (only those changed)")
    ext_modules = translate([extension(name, ".pyx", []) for name in COMPILED], {})
    # A .py's annotations are documentation (``int`` may hold any Python int): only its
    # .pxd's declarations type the compiled module.  ``nonecheck``: a None where a typed
    # object is read raises, as in Python, instead of crashing.
    ext_modules += translate([extension(name, ".py", FROM_SOURCE_ARGS) for name in FROM_SOURCE],
                             {"annotation_typing": False, "nonecheck": True})
    # The largest C first: the parallel build then ends with small modules on every CPU
    # instead of one CPU compiling a large one alone.
    ext_modules.sort(key=lambda ext: -Path(ext.sources[0]).stat().st_size)
    for ext in ext_modules:  # a failed compile skips the module (cythonize drops this flag)
        ext.optional = True

setup(ext_modules=ext_modules, cmdclass={"build_ext": CachedBuildExt})
