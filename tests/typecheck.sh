#!/usr/bin/env bash
# mypy over the installed package's module names. pyproject.toml maps simctl.sim onto sim/
# (and so on); mypy derives module names from folders and cannot read that mapping, so
# this builds a tree of links shaped like the installed package and checks that.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/simctl"
for f in simctl/*.py; do ln -s "$root/$f" "$tree/$f"; done
for layer in sim live policies traces reports; do ln -s "$root/$layer" "$tree/simctl/$layer"; done
cd "$tree"
"${PYTHON:-$root/.venv/bin/python}" -m mypy --config-file "$root/pyproject.toml" --cache-dir "$root/.mypy_cache" -p simctl
