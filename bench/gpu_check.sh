#!/usr/bin/env bash
# EDL on a real NVIDIA GPU, checked end to end (bench/gpu_check.py says what and how):
# NVML through the agent's collector, the DDP example on CUDA under edl-agent (NCCL in a world
# of one; two ranks on the one GPU with NCCL, or gloo where NCCL refuses), a rescale 1 -> 2 -> 1.
#
#   bench/gpu_check.sh             # installs what it needs, then checks; exit 0 all passed,
#                                  # 1 a check failed, 2 no NVIDIA GPU here
#   bench/gpu_check.sh --dry-run   # prints what it would install and check; needs no GPU
#
# What it installs: a venv ($EDL_GPU_VENV, default .venv) with EDL and the `torch` and `gpu`
# extras (PyPI's Linux torch wheel is the CUDA build, with its CUDA libraries; nvidia-ml-py for
# NVML). Only the NVIDIA driver must be there already (nvidia-smi).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${EDL_GPU_VENV:-.venv}"
python="$venv/bin/python"

if [[ "${1:-}" == "--dry-run" ]]; then
  echo "gpu_check: would check for a GPU (nvidia-smi -L), then install into $venv:"
  echo "  python3 -m venv $venv (if missing); pip install -e '.[torch,gpu]'"
  echo "  and check torch.cuda.is_available()"
  exec "${EDL_GPU_PYTHON:-$python}" -m bench.gpu_check --dry-run
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi missing or lists none): nothing checked" >&2
  exit 2
fi
nvidia-smi -L

if [[ ! -x "$python" ]]; then
  python3 -m venv "$venv"
fi
"$python" -m pip install -q --upgrade pip
"$python" -m pip install -q -e '.[torch,gpu]'
if ! "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: torch $("$python" -c 'import torch; print(torch.__version__)') sees no GPU" >&2
  exit 1
fi
"$python" -c 'import torch; print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))'
exec "$python" -m bench.gpu_check "$@"
