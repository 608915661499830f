#!/usr/bin/env bash
# Copies the shared libraries the GPU machine lacks (no cJSON, libmicrohttpd,
# utf8proc there) beside the binary, in BUILD/lib, which its $ORIGIN/lib rpath finds.
# With TARBALL, also packs lpx/{lpx,lib/,LICENSE,licenses.md} into it (make bundle:
# BUILD/lpx-bundle.tar.gz), to unpack anywhere on the target machine.
#   scripts/bundle-libs.sh [BUILD] [TARBALL]
set -euo pipefail
build="${1:-build}"
tarball="${2:-}"
mkdir -p "$build/lib"
for lib in libcjson.so.1 libmicrohttpd.so.12 libutf8proc.so.2 libpcre2-8.so.0; do
    src=$(ldd "$build/lpx" | awk -v l="$lib" '$1==l {print $3}')
    # a second run finds the copy itself through the $ORIGIN/lib rpath
    [ -n "$src" ] && ! [ "$src" -ef "$build/lib/$lib" ] && cp -L "$src" "$build/lib/$lib"
done
# libmicrohttpd pulls GnuTLS in Debian; carry its closure too when not on Ubuntu's base.
for dep in $(ldd "$build/lib/libmicrohttpd.so.12" 2>/dev/null | awk '/=>/ {print $3}'); do
    case "$(basename "$dep")" in libc.so*|libm.so*|libpthread.so*|libdl.so*|ld-linux*) ;; *) cp -Ln "$dep" "$build/lib/" ;; esac
done
ls "$build/lib"
[ -n "$tarball" ] || exit 0
root="$(cd "$(dirname "$0")/.." && pwd)"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/lpx"
cp -a "$build/lpx" "$build/lib" "$stage/lpx/"
cp "$root/LICENSE" "$root/docs/licenses.md" "$stage/lpx/"
tar -C "$stage" -czf "$tarball" lpx
echo "bundle: $tarball"
