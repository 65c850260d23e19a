"""Build the C parts of bulkload (metadata lives in pyproject.toml).

* ``loader.sources._gen``: the in-process C generators (a CPython extension).
* ``bulkload-gen``: the standalone generator program. It is compiled by the
  ``build_scripts`` step below and installed as a "script", i.e. into the environment's
  ``bin/`` next to ``python`` (``pip install .`` and ``pip install -e .`` alike).
  Its sources are listed as the distribution's scripts so that setuptools runs the
  build/install script steps; the custom command compiles them instead of copying them.

Every piece of generator code is compiled with ``-ffp-contract=off``: the float64 fields
must be exactly one IEEE operation each (no fused multiply-add), so that the C and Python
generators agree bit for bit on every machine.
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
GEN_PROGRAM_SOURCES = [f"{GEN_DIR}/bulkload_gen.c", f"{GEN_DIR}/scidb96.c", f"{GEN_DIR}/ticks.c"]
GEN_HEADERS = [f"{GEN_DIR}/scidb96.h", f"{GEN_DIR}/ticks.h", f"{GEN_DIR}/docs_gen.h"]
CFLAGS = ["-O3", "-ffp-contract=off"]
if sys.platform == "win32":  # MSVC: /fp:precise never contracts
    CFLAGS = ["/O2", "/fp:precise"]


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
            cc.link_executable(objects, GEN_PROGRAM, output_dir=self.build_dir)
        if os.name == "posix":
            os.chmod(target, os.stat(target).st_mode | 0o555)
        self._outputs = [target]

    def get_outputs(self):
        return getattr(self, "_outputs", [])

    def get_source_files(self):
        return GEN_PROGRAM_SOURCES + GEN_HEADERS


setup(
    ext_modules=[
        Extension(
            "loader.sources._gen",
            sources=[f"{GEN_DIR}/_genmodule.c", f"{GEN_DIR}/scidb96.c", f"{GEN_DIR}/ticks.c", f"{GEN_DIR}/docs_gen.c"],
            include_dirs=[GEN_DIR],
            depends=GEN_HEADERS,
            extra_compile_args=CFLAGS,
        ),
        Extension(
            "loader.serializers._shuffle",
            sources=[f"{GEN_DIR}/_shufflemodule.c"],
            extra_compile_args=CFLAGS,
        ),
        Extension(
            "loader.stores._lmdbnode",
            sources=[f"{GEN_DIR}/_lmdbnodemodule.c"],
            extra_compile_args=CFLAGS,
        ),
        Extension(
            "loader.stores._preads",
            sources=[f"{GEN_DIR}/_preadsmodule.c"],
            extra_compile_args=CFLAGS,
        ),
        Extension(
            "loader.docs._docsio",
            sources=[f"{GEN_DIR}/_docsiomodule.c"],
            extra_compile_args=CFLAGS,
        ),
    ],
    scripts=GEN_PROGRAM_SOURCES,
    cmdclass={"build_scripts": build_generator_program},
)
