"""Make the torch tree of the PyTorch CPU trainer image: hard links into the shared torch install.

scripts/install-torch.sh installs PyPI's Linux torch wheel with all its CUDA wheels (5 GB) once
per machine, because the CPU-only index is not reachable here and torch does not import without
the CUDA libraries its own libraries name (DT_NEEDED). A CPU trainer needs neither triton (the
GPU compiler of torch.compile, 1 GB) nor the CUDA libraries that are only ever dlopen'd for GPU
work (the cuDNN engines, cuRAND, ...). This keeps everything else and, of the `nvidia/` tree,
exactly the shared objects that `ldd` resolves for torch's own libraries. Hard links: no copy,
and the result is the build context `torch` of images/Containerfile's `trainer-torch` stage.

    python3 images/torch-site.py SITE DEST         # prints DEST and its size
    python3 images/torch-site.py --gpu SITE DEST   # the GPU image's: everything of the install

The GPU image (``trainer-torch-gpu``) needs what the CPU one leaves out: every CUDA library
torch dlopens, NCCL and triton; `--gpu` links the whole install (the driver is the node's,
never in the wheel).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

LEFT_OUT = ("triton", "triton-", "nvidia", "nvidia_", ".complete")
"""Top-level names not linked as a whole (prefixes): triton, and the CUDA tree picked by ldd."""
DRIVER = ("libcuda.so", "libnvidia-")
"""The NVIDIA driver's libraries: the node's, never an image's (only GPU code loads them)."""
LDD_LINE = re.compile(r"^\s*\S+ => (/\S+) \(0x[0-9a-f]+\)$")


def loaded_libraries(site: Path) -> set[Path]:
    """The files under `site`/nvidia that the loader maps for torch's libraries and extensions."""
    binaries = [*site.glob("torch/_C*.so"), *site.glob("torch/lib/*.so*")]
    nvidia = (site / "nvidia").resolve()
    found: set[Path] = set()
    for binary in binaries:
        done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            m = LDD_LINE.match(line)
            if m:
                path = Path(m.group(1)).resolve()
                if path.is_relative_to(nvidia):
                    found.add(path)
            elif "not found" in line and not line.strip().startswith(DRIVER):
                sys.exit(f"torch-site: {binary.name} needs a missing library: {line.strip()}")
    return found


def link_tree(src: Path, dest: Path) -> None:
    """`dest` as a tree of hard links to the files of `src` (symlinks kept as symlinks)."""
    shutil.copytree(src, dest, symlinks=True, copy_function=os.link)


def main(site: Path, dest: Path, gpu: bool = False) -> None:
    """Fill `dest` (replaced when it exists) from the torch install `site` (all of it: `gpu`)."""
    if not (site / "torch").is_dir():
        sys.exit(f"torch-site: no torch in {site} (scripts/install-torch.sh installs it)")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for entry in sorted(site.iterdir()):
        if entry.name.startswith(".complete" if gpu else LEFT_OUT):
            continue
        if entry.is_dir() and not entry.is_symlink():
            link_tree(entry, tmp / entry.name)
        else:
            os.link(entry, tmp / entry.name, follow_symlinks=False)
    for lib in set() if gpu else loaded_libraries(site):
        target = tmp / lib.relative_to(site.resolve())
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(lib, target)
        # the sonames the loader looks for, when they are symlinks next to the file
        for sibling in lib.parent.iterdir():
            if sibling.is_symlink() and sibling.resolve() == lib:
                link = target.parent / sibling.name
                if not link.exists():
                    link.symlink_to(lib.name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    size = sum(p.lstat().st_size for p in dest.rglob("*"))
    print(f"torch-site: {size / 1e9:.2f} GB in {dest}", file=sys.stderr)
    print(dest)


if __name__ == "__main__":
    args = sys.argv[1:]
    whole = args[:1] == ["--gpu"]
    if whole:
        args = args[1:]
    if len(args) != 2:
        sys.exit("usage: torch-site.py [--gpu] SITE DEST")
    main(Path(args[0]), Path(args[1]), gpu=whole)
