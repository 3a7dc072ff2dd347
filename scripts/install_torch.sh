#!/usr/bin/env bash
# The agent's optional PyTorch/TorchRec hooks: torch 2.13.0 (CPU), fbgemm-gpu-cpu 1.8.0, torchrec 1.8.0.
# torchrec goes in with --no-deps (its pinned deps would pull a CUDA torch), then its small needs.
set -euo pipefail
PY=${1:-.venv/bin/python}
"$PY" -m pip install -q torch==2.13.0
"$PY" -m pip install -q fbgemm-gpu-cpu==1.8.0
"$PY" -m pip install -q "tensordict==0.15.3" "pyre-extensions==0.0.32" "typing-inspect==0.9.0"
# Last, so that no later pip run checks torchrec's pins and prints a (harmless) red ERROR.
"$PY" -m pip install -q --no-deps torchrec==1.8.0
echo "torchrec 1.8.0 installed without its pinned dependencies, on purpose (they would pull a" \
  "CUDA torch); 'pip check' listing them as missing is expected."
