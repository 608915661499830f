#!/usr/bin/env bash
# Installs every build and test dependency of lpx. Idempotent and quiet when
# everything is already there (it checks before it installs).
set -euo pipefail

APT_PKGS=(build-essential cmake pkg-config clang libclang-rt-14-dev
          libmicrohttpd-dev libcjson-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev
          python3 python3-pip curl unzip chromium chromium-driver
          nginx-light)
# Python packages used by tests and fixture tools (never by lpx itself).
PIP_PKGS=(pytest tokenizers==0.23.3 transformers==5.24.0 jinja2==3.1.6 numpy gguf==0.19.0 safetensors==0.8.0 openai
          prometheus-client==0.26.0 selenium==4.38.0 httpx==0.28.1
          kubernetes-validate==1.37.0 PyYAML jsonschema==4.26.0 ml_dtypes==0.5.4)

missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: apt-get install ${missing[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

stamp="${LPX_CACHE:-$HOME/.cache/lpx}/pip-deps.stamp"
want="$(printf '%s\n' "${PIP_PKGS[@]}")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "install-deps: pip install ${PIP_PKGS[*]}"
    python3 -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
    mkdir -p "$(dirname "$stamp")"
    printf '%s' "$want" >"$stamp"
fi
