"""Build the C parts of bulkload (metadata lives in pyproject.toml).

Each CPython extension's source lies beside the package that imports it:

* ``loader/sources/_genmodule.c`` -> ``loader.sources._gen``: the in-process C generators,
  the binding of the generator library in ``generators/`` (scidb96.c, ticks.c, docs_gen.c).
* ``loader/serializers/_shufflemodule.c`` -> ``loader.serializers._shuffle``: the byte shuffle.
* ``loader/stores/_lmdbnodemodule.c`` -> ``loader.stores._lmdbnode``: LMDB leaf nodes read
  through the map; ``loader/stores/_preadsmodule.c`` -> ``loader.stores._preads``.
* ``loader/docs/_docsiomodule.c`` -> ``loader.docs._docsio``: JSON directories.

Each has a ``.pyi`` stub beside it. ``generators/`` keeps the generator library (plain C,
no Python) and ``bulkload-gen``, the standalone generator program. It is compiled by the
``build_scripts`` step below and installed as a "script", i.e. into the environment's
``bin/`` next to ``python`` (``pip install .`` and ``pip install -e .`` alike).
Its sources are listed as the distribution's scripts so that setuptools runs the
build/install script steps; the custom command compiles them instead of copying them.

Every piece of C is compiled with ``-ffp-contract=off``: the generators' float64 fields
must be exactly one IEEE operation each (no fused multiply-add), so that the C and Python
generators agree bit for bit on every machine.

Two environment variables change the flags (``make install`` and ``make test-sanitize``
set them; a plain ``pip install`` sets neither):

* ``BULKLOAD_WERROR=1``: ``-Wall -Wextra -Werror`` - the test build fails on any warning
  (gcc and clang).
* ``BULKLOAD_SANITIZE=1``: ``-fsanitize=address,undefined -fno-omit-frame-pointer -O1 -g``
  (the extensions and bulkload-gen), for ``make test-sanitize``.
"""

import os
import sys

# After `import setuptools`, `distutils` is setuptools' own copy (also on Python >= 3.12).
from distutils.ccompiler import new_compiler
from distutils.command.build_scripts import build_scripts
from distutils.sysconfig import customize_compiler

from setuptools import Extension, setup

GEN_DIR = "generators"
GEN_PROGRAM = "bulkload-gen"
GEN_LIBRARY = [f"{GEN_DIR}/scidb96.c", f"{GEN_DIR}/ticks.c"]
GEN_PROGRAM_SOURCES = [f"{GEN_DIR}/bulkload_gen.c", *GEN_LIBRARY]
GEN_HEADERS = [f"{GEN_DIR}/scidb96.h", f"{GEN_DIR}/ticks.h", f"{GEN_DIR}/docs_gen.h"]
LZ4_DIR = "third_party/lz4"  # LZ4 1.9.4 (BSD 2-clause), the block decoder of the shuffle's reads
XXH_DIR = "third_party/xxhash"  # xxHash 0.8.3 (BSD 2-clause), header only: BLZ3 block hashes
WERROR = os.environ.get("BULKLOAD_WERROR") == "1"
SANITIZE = os.environ.get("BULKLOAD_SANITIZE") == "1"


def _flags() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) of every C source, from the environment (module doc)."""
    if sys.platform == "win32":  # MSVC: /fp:precise never contracts
        return ["/O2", "/fp:precise"], []
    cflags, ldflags = ["-O3", "-ffp-contract=off"], []
    if WERROR:
        cflags += ["-Wall", "-Wextra", "-Werror"]
    if SANITIZE:
        sanitize = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        cflags += [*sanitize, "-O1", "-g"]  # after -O3: the last -O wins; -O1 keeps the stacks readable
        ldflags += sanitize
    return cflags, ldflags


CFLAGS, LDFLAGS = _flags()
#: a sanitized build keeps its objects apart, so that neither build reuses the other's
#: (``pip install .`` builds in ./build and skips what is up to date there)
BUILD_BASE = os.path.join("build", "sanitize") if SANITIZE else "build"


def _compiler():
    cc = new_compiler()
    customize_compiler(cc)
    return cc


class build_generator_program(build_scripts):
    """Compile the bulkload-gen program into the scripts build directory."""

    def run(self):
        build = self.get_finalized_command("build")
        temp = os.path.join(build.build_temp, "bulkload-gen")
        self.mkpath(self.build_dir)
        self.mkpath(temp)
        cc = _compiler()
        exe = cc.executable_filename(GEN_PROGRAM)
        target = os.path.join(self.build_dir, exe)
        sources = GEN_PROGRAM_SOURCES
        deps = sources + GEN_HEADERS + [__file__]
        if (
            self.force
            or not os.path.exists(target)
            or any(os.path.getmtime(d) > os.path.getmtime(target) for d in deps)
        ):
            objects = cc.compile(sources, output_dir=temp, include_dirs=[GEN_DIR], extra_postargs=CFLAGS)
            cc.link_executable(objects, GEN_PROGRAM, output_dir=self.build_dir, extra_postargs=LDFLAGS)
        if os.name == "posix":
            os.chmod(target, os.stat(target).st_mode | 0o555)
        self._outputs = [target]

    def get_outputs(self):
        return getattr(self, "_outputs", [])

    def get_source_files(self):
        return GEN_PROGRAM_SOURCES + GEN_HEADERS


def _extension(
    name: str, *library: str, include: tuple[str, ...] = (GEN_DIR,), headers: list[str] = GEN_HEADERS
) -> Extension:
    """The extension ``loader.<package>._<module>`` from ``loader/<package>/_<module>module.c``
    beside its package (and the C ``library`` it binds, whose headers are in ``include``:
    the generator library, or LZ4 for the shuffle's reads)."""
    source = name.replace(".", "/") + "module.c"
    return Extension(
        name,
        sources=[source, *library],
        include_dirs=list(include) if library else [],
        depends=headers if library else [],
        extra_compile_args=CFLAGS,
        extra_link_args=LDFLAGS,
    )


setup(
    ext_modules=[
        _extension("loader.sources._gen", *GEN_LIBRARY, f"{GEN_DIR}/docs_gen.c"),
        _extension(
            "loader.serializers._shuffle",
            f"{LZ4_DIR}/lz4.c",
            f"{XXH_DIR}/xxh3_avx2.c",
            include=(LZ4_DIR, XXH_DIR),
            headers=[f"{LZ4_DIR}/lz4.h", f"{XXH_DIR}/xxhash.h"],
        ),
        _extension("loader.stores._lmdbnode"),
        _extension("loader.stores._preads"),
        _extension("loader.docs._docsio"),
    ],
    scripts=GEN_PROGRAM_SOURCES,
    cmdclass={"build_scripts": build_generator_program},
    # the extensions' C sources lie in the packages: in the sdist, not installed beside the modules
    exclude_package_data={"": ["*.c"]},
    options={"build": {"build_base": BUILD_BASE}},
)
