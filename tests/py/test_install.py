"""Installing lpx: the dependency split of scripts/install-deps.sh (build and run vs test
tools), `make install`'s CMake rules (a C program built against the installed header and
library through pkg-config, run, and compared with the gguf package's reading of the
model), and `make bundle`'s tarball unpacked elsewhere and started with no library path."""
import os
import pathlib
import re
import shutil
import subprocess
import tarfile

import gguf
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def deps(*args):
    r = subprocess.run([ROOT / "scripts/install-deps.sh", "--list", *args], capture_output=True,
                       text=True, check=True)
    lines = dict(line.split(":", 1) for line in r.stdout.splitlines())
    return set(lines["apt"].split()), set(lines["pip"].split())


def test_build_deps_are_a_subset_without_the_test_tools():
    apt, pip = deps()
    t_apt, t_pip = deps("--test")
    assert apt < t_apt and pip <= t_pip
    for tool in ("chromium", "chromium-driver", "nginx-light", "clang"):
        assert tool not in apt and tool in t_apt
    assert not pip, "building and running lpx needs no Python package"
    assert any(p.startswith("pytest") for p in t_pip)
    assert {"build-essential", "cmake", "pkg-config", "unzip", "python3-pip"} <= apt


def test_every_linked_library_has_its_dev_package_in_the_build_deps():
    """Each pkg-config module CMakeLists.txt asks for (libedit included) is provided, on
    this machine, by a package the build list installs."""
    if not shutil.which("dpkg"):
        pytest.skip("not a Debian machine")
    text = (ROOT / "CMakeLists.txt").read_text()
    modules = set()
    for args in re.findall(r"pkg_check_modules\(([^)]*)\)", text):
        modules |= {w for w in args.split()[1:] if w not in ("REQUIRED", "QUIET", "IMPORTED_TARGET")}
    assert {"libcjson", "libmicrohttpd", "libedit"} <= modules
    apt, _ = deps()
    for m in sorted(modules):
        pcdir = subprocess.run(["pkg-config", "--variable=pcfiledir", m], capture_output=True,
                               text=True)
        assert pcdir.returncode == 0, f"{m}: not installed here"
        owner = subprocess.run(["dpkg", "-S", f"{pcdir.stdout.strip()}/{m}.pc"],
                               capture_output=True, text=True, check=True).stdout
        pkg = owner.split(":")[0]
        assert pkg in apt, f"{m}.pc comes from {pkg}, which install-deps.sh does not install"


PROGRAM = r"""
#include <lpx.h>
#include <stdio.h>
int main(int argc, char **argv) {
    lpx_model *m;
    if (lpx_model_open(argv[1], &m) != LPX_OK) {
        fprintf(stderr, "%s\n", lpx_last_error());
        return 1;
    }
    lpx_model_info info;
    if (lpx_model_info_get(m, &info) != LPX_OK) return 1;
    printf("%s %s %d %d %d\n", lpx_version(), info.arch, info.n_layers, info.vocab_size,
           info.d_model);
    lpx_model_close(m);
    return 0;
}
"""


@pytest.fixture(scope="module")
def prefix(tmp_path_factory, lpx_bin):
    prefix = tmp_path_factory.mktemp("prefix")
    build = pathlib.Path(lpx_bin).parent
    r = subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return prefix


def test_install_layout(prefix, lpx_bin):
    files = {p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if not p.is_dir()}
    assert "bin/lpx" in files and "include/lpx.h" in files
    assert "share/doc/lpx/LICENSE" in files
    libdir = next(p for p in files if p.endswith("/pkgconfig/lpx.pc")).rsplit("/", 2)[0]
    assert {f"{libdir}/liblpx.so", f"{libdir}/liblpx.a"} <= files
    r = subprocess.run([prefix / "bin/lpx", "--version"], capture_output=True, text=True)
    v = subprocess.run([lpx_bin, "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == v.stdout


def test_man_page_is_the_help_text_of_every_command(prefix, lpx_bin):
    """lpx(1), installed to share/man/man1, rendered by groff: a section for every
    command (and subcommand) of the program's table, whose text is `lpx help CMD`'s."""
    page = prefix / "share/man/man1/lpx.1"
    assert page.is_file()
    out = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", "-rLL=200n", str(page)],
                         capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    comp = subprocess.run([lpx_bin, "completion", "bash"], capture_output=True, text=True,
                          check=True).stdout
    cmds = re.search(r"^_lpx_commands='(.*)'$", comp, re.M).group(1).split()
    subs = dict(re.findall(r"^    '(\w+):'\) echo ([\w-]+) ;;$", comp, re.M))
    assert {"run", "serve", "bench", "logits"} <= set(cmds) and subs.get("bench") == "serve"
    heads = [i for i, l in enumerate(lines) if re.match(r"^   lpx [\w -]+$", l)]
    sections = {lines[i].strip(): i for i in heads}
    names = [f"lpx {c}" for c in cmds] + [f"lpx {c} {s}" for c, s in subs.items()]
    assert sorted(sections) == sorted(names)
    for name in names:
        start = sections[name] + 1
        # to the next subsection, or the next section (its title at column 0)
        end = next(i for i in range(start, len(lines) + 1)
                   if i == len(lines) or i in heads or lines[i][:1] not in ("", " "))
        body = [l[7:] if l.startswith(" " * 7) else l.strip() for l in lines[start:end]]
        while body and not body[-1]:
            body.pop()
        want = subprocess.run([lpx_bin, "help", *name.split()[1:]], capture_output=True,
                              text=True, check=True).stdout.rstrip("\n").splitlines()
        assert [l.rstrip() for l in body] == [l.rstrip() for l in want], name


@pytest.mark.parametrize("static", [False, True])
def test_program_against_the_installed_library(prefix, smollm2, lpx_bin, tmp_path, static):
    pc = next(prefix.rglob("lpx.pc"))
    env = dict(os.environ, PKG_CONFIG_PATH=str(pc.parent))
    pkgconfig = lambda *a: subprocess.run(["pkg-config", *a], capture_output=True, text=True,
                                          env=env, check=True).stdout
    flags = pkgconfig("--cflags", "--libs", "lpx")
    assert str(prefix) in flags
    if static:
        # the archive in place of -llpx, then what lpx.pc says it needs (Requires.private
        # and Libs.private) as shared libraries: pkg-config --static would also ask for
        # the static archives of libcurl's own dependencies, which Debian's -dev packages
        # of those do not all ship
        archive = next(prefix.rglob("liblpx.a"))
        flags = flags.replace("-llpx", str(archive))
        flags += " " + pkgconfig("--libs", *pkgconfig("--print-requires-private", "lpx").split())
        private = re.search(r"^Libs.private:(.*)$", pc.read_text(), re.M).group(1)
        flags += " " + private
    src = tmp_path / "p.c"
    src.write_text(PROGRAM)
    exe = tmp_path / "p"
    cmd = ["cc", "-std=c11", "-Wall", "-Werror", str(src), "-o", str(exe), *flags.split()]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, (cmd, r.stderr)
    run_env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(pc.parent.parent)}
    r = subprocess.run([exe, smollm2], capture_output=True, text=True, env=run_env)
    assert r.returncode == 0, r.stderr
    version, arch, layers, vocab, d_model = r.stdout.split()
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True, env=run_env).stdout
    assert ("liblpx.so" in ldd) != static, ldd
    # the model as the gguf package reads it
    reader = gguf.GGUFReader(smollm2)
    field = lambda k: reader.fields[k].parts[reader.fields[k].data[0]]
    a = bytes(field("general.architecture")).decode()
    assert arch == a
    assert int(layers) == int(field(f"{a}.block_count")[0])
    assert int(d_model) == int(field(f"{a}.embedding_length")[0])
    assert int(vocab) == len(reader.fields["tokenizer.ggml.tokens"].data)
    assert subprocess.run([lpx_bin, "--version"], capture_output=True,
                          text=True).stdout.split() == ["lpx", version]


def test_bundle_tarball_runs_unpacked_elsewhere(tmp_path, lpx_bin):
    build = tmp_path / "build"
    build.mkdir()
    shutil.copy2(lpx_bin, build / "lpx")
    tarball = tmp_path / "lpx-bundle.tar.gz"
    r = subprocess.run([ROOT / "scripts/bundle-libs.sh", str(build), str(tarball)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with tarfile.open(tarball) as t:
        names = set(t.getnames())
        assert {"lpx/lpx", "lpx/LICENSE", "lpx/licenses.md", "lpx/lib/libcjson.so.1",
                "lpx/lib/libmicrohttpd.so.12"} <= names, names
        t.extractall(tmp_path / "elsewhere")
    exe = tmp_path / "elsewhere/lpx/lpx"
    r = subprocess.run([exe, "--version"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0 and r.stdout.startswith("lpx "), r.stderr
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    assert str(tmp_path / "elsewhere/lpx/lib/libcjson.so.1") in ldd, ldd
