"""Assemble the adapter image's root filesystem: Python, its libraries and /opt/edl, nothing else.

Run in a build stage of images/Containerfile (with the full Debian base); the final image is
`FROM scratch` + this folder, so it has no shell, no package manager and no coreutils. The
shared libraries are the ones the dynamic loader resolves (`ldd`) for the interpreter and
for every extension module in the stdlib and in /opt/edl, copied under the names it looks
for. The stdlib parts the adapter never imports (tests, IDLE, tkinter, ensurepip, 2to3,
pydoc's data, the C headers, curses, sqlite3, dbm, with their extension modules and so their
libraries) are left out, and so is the kubernetes package's asyncio client with what only it
needs (aiohttp and friends).

The stdlib and the third-party packages are bytecode only (`x.pyc` where `x.py` was, which
Python imports without the source, and no `__pycache__` copy): a traceback through them names
file and line but cannot show the line. The kubernetes client's generated models are compiled
without docstrings (-OO; 20 MB as source + bytecode, 10 MB so). EDL's own packages keep their
source. About 87 MB of files in all (155 MB before).

    python3 adapter-rootfs.py /rootfs /opt/edl
"""

from __future__ import annotations

import os
import py_compile
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
from pathlib import Path

SKIPPED_STDLIB = {
    "test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
    "venv", "distutils", "unittest", "config-3.11-x86_64-linux-gnu", "sqlite3", "dbm",
}  # fmt: skip
SKIPPED_EXTENSIONS = (
    "_test", "_ctypes_test", "_xx", "xxlimited", "_curses", "_dbm", "_gdbm", "_sqlite3", "nis",
    "readline", "ossaudiodev", "audioop", "_crypt", "_tkinter", "_lsprof",
)  # fmt: skip
"""lib-dynload modules (name prefixes) of the left-out stdlib, the tests' and profilers'."""
OWN = ("agent", "metrics_adapter", "edl_common", "edl_sizing")
"""EDL's packages, which keep their source (readable tracebacks)."""
DOCSTRINGS_OFF = ("kubernetes/client/models",)
"""Compiled with -OO (no docstrings): the generated models, which assert nothing and whose
docstrings nobody reads. Not the API modules: `kubernetes.watch` reads their docstrings
(`:rtype:`, `follow`) where a method has no annotations."""
ASYNC_ONLY = (
    "kubernetes/aio", "aiohttp", "aiohttp-*", "aiohttp_retry*", "yarl", "yarl-*", "multidict",
    "multidict-*", "frozenlist", "frozenlist-*", "propcache", "propcache-*", "aiosignal",
    "aiosignal-*", "attr", "attrs", "attrs-*", "aiohappyeyeballs*",
)  # fmt: skip
"""The kubernetes package's asyncio client and what only it imports: EDL uses the sync one."""
ETC = {
    "passwd": "root:x:0:0:root:/root:/nonexistent\nedl:x:65532:65532:edl:/tmp:/nonexistent\n",
    "group": "root:x:0:\nedl:x:65532:\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}
LDD_LINE = re.compile(r"^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$")


def copy(src: Path, root: Path) -> None:
    """`src` to the same path under `root`, a symlink as a symlink (and its target too)."""
    dest = root / src.relative_to("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        target = os.readlink(src)
        os.symlink(target, dest)
        copy((src.parent / target).resolve(), root)
    elif src.is_dir():
        shutil.copytree(src, dest, symlinks=True)
    else:
        shutil.copy2(src, dest)


def libraries(binary: Path) -> set[Path]:
    """The shared objects the dynamic loader maps for `binary` (its ldd)."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    out = set()
    for line in done.stdout.splitlines():
        m = LDD_LINE.match(line)
        if m:
            out.add(Path(m.group(1)))
    return out


def bytecode_only(tree: Path, root: Path, optimize: int) -> None:
    """Every `x.py` under `tree` replaced by its bytecode `x.pyc` (no __pycache__ left).

    The bytecode names the file by its path in the image (`root` is the image's /).
    """
    for cache in [p for p in tree.rglob("__pycache__") if p.is_dir()]:
        shutil.rmtree(cache)
    sources = [p for p in tree.rglob("*.py") if not p.is_symlink()]
    for source in sources:
        try:
            py_compile.compile(
                str(source),
                cfile=str(source.with_suffix(".pyc")),
                dfile=str(Path("/") / source.relative_to(root)),
                doraise=True,
                optimize=optimize,
            )
        except py_compile.PyCompileError:
            continue  # not Python 3.11 (templates, py2 leftovers): the source stays
        source.unlink()


def bytecode_only_file(source: Path, root: Path) -> None:
    """A top-level module `x.py` (e.g. typing_extensions) replaced by `x.pyc`."""
    py_compile.compile(
        str(source),
        cfile=str(source.with_suffix(".pyc")),
        dfile=str(Path("/") / source.relative_to(root)),
        doraise=True,
    )
    source.unlink()


def main(root: Path, app: Path) -> None:
    """Fill `root`; prints its size."""
    python = Path(sys.executable).resolve()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for top in ("lib", "lib32", "lib64", "libx32"):  # merged /usr: /lib -> usr/lib, as here
        if Path("/", top).is_symlink():
            (root / "usr" / top).mkdir(parents=True, exist_ok=True)
            if not (root / top).is_symlink():
                os.symlink(os.readlink(Path("/", top)), root / top)
    copy(python, root)
    for name in ("python3", "python"):
        link = root / "usr/bin" / name
        if not link.exists():
            os.symlink(python.name, link)
    for entry in sorted(stdlib.iterdir()):
        if entry.name not in SKIPPED_STDLIB and entry.name != "site-packages":
            copy(entry, root)
    copy(app, root)
    for site in (root / app.relative_to("/")).glob("lib/python3*/site-packages"):
        for pattern in ASYNC_ONLY:
            for path in site.glob(pattern):
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    for ext in (root / stdlib.relative_to("/") / "lib-dynload").glob("*.so"):  # no ldd for them
        if ext.name.startswith(SKIPPED_EXTENSIONS):
            ext.unlink()
    rooted_stdlib = root / stdlib.relative_to("/")
    rooted_app = root / app.relative_to("/")
    bytecode_only(rooted_stdlib, root, optimize=0)
    for site in rooted_app.glob("lib/python3*/site-packages"):
        for tree in DOCSTRINGS_OFF:
            bytecode_only(site / tree, root, optimize=2)
        for package in site.iterdir():
            if package.name in OWN or not (package.is_dir() or package.suffix == ".py"):
                continue
            if package.is_dir():
                bytecode_only(package, root, optimize=0)
            else:
                bytecode_only_file(package, root)
    dynload = sorted((rooted_stdlib / "lib-dynload").glob("*.so"))
    elfs = [python, *dynload, *rooted_app.rglob("*.so"), *rooted_app.rglob("*.so.*")]
    for lib in set().union(*(libraries(e) for e in elfs)):
        copy(lib, root)
    copy(Path("/etc/ssl/certs/ca-certificates.crt"), root)
    for name, text in ETC.items():
        (root / "etc" / name).write_text(text)
    tmp = root / "tmp"
    tmp.mkdir(exist_ok=True)
    tmp.chmod(stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO | stat.S_ISVTX)
    size = sum(p.lstat().st_size for p in root.rglob("*"))
    print(f"adapter rootfs: {size / 1e6:.1f} MB in {root}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
