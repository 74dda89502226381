# SPDX-License-Identifier: LGPL-2.1-or-later
"""Build of the `beluga` package for pip (`pip install ./userspace/python`).

The C extensions are compiled against the Python that runs pip, with the
flags of python/Makefile: libbeluga's sources are linked into _beluga
statically (no runtime dependency on libbeluga.so), warnings are errors, and
only PyInit_* is exported. BELUGA_PY_FAKE=1 in the environment builds the
test variant instead, over tests/userspace/fake_kernel.c and the module's
portable core (kmod/core), like build/python-fake; it needs the whole
source tree, not just this directory.

Objects go to userspace/build/pip-<variant>/, outside the source tree.
"""

import os
import re
import pathlib
import sysconfig

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
USERSPACE = HERE.parent
REPO = USERSPACE.parent
FAKE = os.environ.get("BELUGA_PY_FAKE") == "1"
VARIANT = "fake" if FAKE else "real"
BUILD_BASE = USERSPACE / "build" / f"pip-{VARIANT}"
VERSION = (REPO / "VERSION").read_text(encoding="ascii").strip()



def makefile_facts():
    """libbeluga's sources and their own flags, read from userspace/Makefile
    (LIB_SRCS, and `%/obj/lib/NAME.o: BEL_CFLAGS += ...` lines) so that the
    two builds cannot disagree."""
    text = (USERSPACE / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    m = re.search(r"^LIB_SRCS\s*:=(.*)$", text, re.M)
    if not m:
        raise SystemExit(f"no LIB_SRCS in {USERSPACE / 'Makefile'}: cannot build libbeluga")
    sources = [s[len("lib/"):] for s in m.group(1).split()]
    flags = {}
    for name, extra in re.findall(r"^%/obj/lib/([\w-]+)\.o:\s*BEL_CFLAGS\s*\+=(.*)$", text, re.M):
        flags[name + ".c"] = [f.replace("$(CORE_DIR)", str(REPO / "kmod" / "core"))
                              for f in extra.split()]
    return sources, flags


LIB_SOURCES, LIB_FLAGS = makefile_facts()
FAKE_CORE = ["pool", "client", "index", "lru", "pins", "mh_format", "mh_host", "mh_ops"]
WARNINGS = ["-Wall", "-Wextra", "-Werror"]
# Python's headers are not held to -Wextra -Werror (the Makefile's -isystem).
PY_SYSTEM = ["-isystem", sysconfig.get_paths()["include"]]
HIDDEN = ["-fPIC", "-fvisibility=hidden"]


def version_header():
    """include/beluga_version.h, which userspace/Makefile also generates."""
    major, minor = VERSION.split(".")[:2]
    text = ("/* Generated from VERSION by userspace/python/setup.py. */\n"
            f"#define LIBBELUGA_VERSION_MAJOR {major}\n"
            f"#define LIBBELUGA_VERSION_MINOR {minor}\n"
            f'#define LIBBELUGA_VERSION "{VERSION}"\n')
    inc = BUILD_BASE / "include"
    inc.mkdir(parents=True, exist_ok=True)
    path = inc / "beluga_version.h"
    if not path.exists() or path.read_text(encoding="ascii") != text:
        path.write_text(text, encoding="ascii")
    return inc


def paths(base, names):
    return [str(base / n) for n in names]


class ObjectGroup:
    """Sources compiled with their own flags (the portable core is gnu11 and
    does not see userspace's headers), then linked into an extension."""

    def __init__(self, sources, include_dirs, cflags):
        self.sources = sources
        self.include_dirs = include_dirs
        self.cflags = cflags


class BuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        # setuptools compares only the extension's own source with the .so:
        # rebuild always, so that a changed libbeluga or header is never missed
        # (the whole build takes seconds).
        self.force = True

    def build_extension(self, ext):
        objects = []
        for group in getattr(ext, "object_groups", ()):
            objects += self.compiler.compile(
                group.sources, output_dir=self.build_temp,
                include_dirs=group.include_dirs, extra_postargs=group.cflags)
        ext.extra_objects = objects + list(ext.extra_objects or [])
        super().build_extension(ext)


def extensions():
    if FAKE and not (REPO / "tests" / "userspace" / "fake_kernel.c").exists():
        raise SystemExit("BELUGA_PY_FAKE=1 needs the whole Beluga source tree "
                         f"(tests/userspace/fake_kernel.c is not under {REPO})")
    bel_includes = [str(USERSPACE / "include"), str(version_header()),
                    str(USERSPACE / "lib"), str(REPO / "uapi")]
    bel_cflags = ["-std=c11", "-D_GNU_SOURCE"] + WARNINGS + HIDDEN + PY_SYSTEM
    link_args = [f"-Wl,--version-script={HERE / 'extension.map'}"]
    libraries = ["dl", "pthread", "uring"]   # liburing: Debian's liburing-dev
    # setuptools takes only sources below this directory; the rest of the tree
    # (libbeluga, the fake kernel, the core) is compiled by BuildExt.
    plain = [n for n in LIB_SOURCES if n not in LIB_FLAGS]
    groups = [ObjectGroup(paths(USERSPACE / "lib", plain), bel_includes, bel_cflags)]
    groups += [ObjectGroup(paths(USERSPACE / "lib", [n]), bel_includes, bel_cflags + extra)
               for n, extra in LIB_FLAGS.items() if n in LIB_SOURCES]
    if FAKE:
        bel_cflags = bel_cflags + ["-DBELUGA_PY_FAKE"]
        bel_includes = bel_includes + [str(REPO / "tests" / "userspace"), str(REPO / "kmod" / "core")]
        groups.append(ObjectGroup([str(REPO / "tests" / "userspace" / n)
                                   for n in ("fake_kernel.c", "fake_mh.c")],
                                  bel_includes, bel_cflags))
        groups.append(ObjectGroup(
            paths(REPO / "kmod" / "core", [f"{n}.c" for n in FAKE_CORE]),
            [str(REPO / "uapi"), str(REPO / "kmod" / "core")],
            ["-std=gnu11"] + WARNINGS + HIDDEN))
        libraries.append("urcu-bp")
    beluga = Extension("beluga._beluga", sources=["beluga/_beluga.c"], include_dirs=bel_includes,
                       extra_compile_args=bel_cflags, extra_link_args=link_args,
                       libraries=libraries)
    beluga.object_groups = groups
    cuda = Extension("beluga._cuda", sources=["beluga/_cuda.c"],
                     include_dirs=[str(USERSPACE / "cuda")],
                     extra_compile_args=["-std=c11", "-D_GNU_SOURCE"] + WARNINGS + HIDDEN + PY_SYSTEM,
                     extra_link_args=link_args, libraries=["dl"])
    return [beluga, cuda]

setup(
    version=VERSION,
    packages=find_packages(include=["beluga", "beluga.*"]),
    ext_modules=extensions(),
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": str(BUILD_BASE)},
             "egg_info": {"egg_base": str(BUILD_BASE)}},
)
