#!/usr/bin/env bash
# Puts PyTorch (CPU use, gloo) into a venv from a shared, version-keyed install outside the clone.
#
#   scripts/install-torch.sh VENV
#
# PyPI's Linux torch wheel depends on ~2.3 GB of CUDA wheels (5.3 GB installed) and will not
# import without them (`--no-deps` fails at `import torch`: libtorch_cuda.so needs libcudart,
# libcublas, libcudnn, libnccl, ...), and the CPU-only wheel index is not reachable here. So the
# whole pinned set (the `torch` extra of pyproject.toml) is installed ONCE per machine into
# $EDL_CACHE_DIR/torch/<pin>-<python tag>/ and every venv sees it through a .pth file: a cold
# machine pays the download and the unpacking once, a warm one nothing. pip then counts torch as
# installed, so `pip install -e '.[torch]'` is satisfied and installs nothing more.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: install-torch.sh VENV}
py="$venv/bin/python"
cache=${EDL_CACHE_DIR:-$HOME/.cache/edl}/torch
pin=$("$py" -c 'import tomllib; x = tomllib.load(open("pyproject.toml", "rb"))["project"]
print(next(r for r in x["optional-dependencies"]["torch"] if r.startswith("torch")))')
tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
site="$cache/${pin/==/-}-$tag"

if [[ ! -f "$site/.complete" ]]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d "$cache/.install-XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "torch: installing $pin into $site (once per machine; ~2.8 GB download)" >&2
  start=$SECONDS
  "$py" -m pip install -q --no-compile --target "$tmp/site" "$pin"
  touch "$tmp/site/.complete"
  # Another venv may have finished first: keep whichever landed, never a half-written one.
  mv -T "$tmp/site" "$site" 2>/dev/null || true
  echo "torch: installed in $((SECONDS - start)) s" >&2
fi
purelib=$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
echo "$site" >"$purelib/edl-torch.pth"
