#!/bin/sh
# make-man.sh LPX OUT: writes the man page lpx(1) to OUT from the program's own help
# text, so the two never differ: `lpx --help` for the description, then one section a
# command with `lpx help CMD` (and `lpx help CMD SUB` for a subcommand such as bench
# serve). The commands and subcommands are the ones `lpx completion bash` lists (the
# program's command table). Run by the build (target man); installed to share/man/man1.
set -eu
lpx=$1
out=$2
tmp=$out.tmp

# roff: help text verbatim (no fill), backslashes escaped, no line read as a request,
# characters past ASCII as groff's \[uXXXX] (so no input encoding is assumed; perl is
# Debian's perl-base, always there).
verbatim() {
    echo '.nf'
    sed -e 's/\\/\\e/g' -e "s/^\([.']\)/\\\\\&\1/" |
        perl -CS -pe 's/([^\x00-\x7f])/sprintf("\\[u%04X]", ord($1))/ge'
    echo '.fi'
}

completion=$("$lpx" completion bash)
commands=$(printf '%s\n' "$completion" | sed -n "s/^_lpx_commands='\(.*\)'$/\1/p")
[ -n "$commands" ] || { echo "make-man.sh: no command list from $lpx completion bash" >&2; exit 1; }
version=$("$lpx" --version | sed -n '1s/^lpx //p')

{
    echo ".TH LPX 1 \"\" \"lpx $version\" \"User Commands\""
    echo '.SH NAME'
    echo 'lpx \- fast, dependable inference for small language models'
    echo '.SH SYNOPSIS'
    echo '.B lpx'
    echo '.I command'
    echo '[options]'
    echo '.SH DESCRIPTION'
    "$lpx" --help | verbatim
    echo '.SH COMMANDS'
    echo 'Each section is the text of'
    echo '.BR "lpx help " \fIcommand\fR,'
    echo 'the same as'
    echo '.BR "lpx " \fIcommand\fR " \-\-help" .'
    for c in $commands; do
        echo ".SS lpx $c"
        "$lpx" help "$c" | verbatim
        sub=$(printf '%s\n' "$completion" | sed -n "s/^    '$c:') echo \([a-z-]*\) ;;$/\1/p")
        if [ -n "$sub" ]; then
            echo ".SS lpx $c $sub"
            "$lpx" help "$c" "$sub" | verbatim
        fi
    done
    echo '.SH SEE ALSO'
    echo 'README.md and docs/ in the lpx sources (docs/server.md, docs/batch.md, ...).'
} >"$tmp"
mv "$tmp" "$out"
