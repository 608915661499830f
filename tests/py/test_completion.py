"""lpx help COMMAND, lpx COMMAND --list-options and lpx completion bash: help prints what
--help prints, the listing is every option the command's parser takes (and each is in its
--help text), and the bash script, sourced in a real bash, completes commands, options,
subcommands and file arguments."""
import re
import shutil
import subprocess

import pytest


def lpx(lpx_bin, *args):
    return subprocess.run([lpx_bin, *args], capture_output=True, text=True)


def commands(lpx_bin):
    """The commands `lpx --help` lists, then the subcommands (bench serve, batch merge)."""
    text = lpx(lpx_bin, "--help").stdout
    names = re.findall(r"^  ([a-z]+) {2,}", text, re.M)
    assert {"run", "chat", "serve", "batch", "bench", "doctor", "plan", "logits"} <= set(names)
    return [[n] for n in names] + [["bench", "serve"], ["batch", "merge"]]


def test_help_command_prints_what_help_prints(lpx_bin):
    for cmd in commands(lpx_bin):
        want = lpx(lpx_bin, *cmd, "--help")
        got = lpx(lpx_bin, "help", *cmd)
        assert want.returncode == 0 and want.stdout, cmd
        assert (got.returncode, got.stdout, got.stderr) == (0, want.stdout, ""), cmd
    assert lpx(lpx_bin, "help").stdout == lpx(lpx_bin, "--help").stdout
    r = lpx(lpx_bin, "help", "nosuch")
    assert r.returncode == 2 and r.stderr == "lpx help: unknown command 'nosuch' (lpx --help lists them)\n"


def listing(lpx_bin, cmd):
    r = lpx(lpx_bin, *cmd, "--list-options")
    assert (r.returncode, r.stderr) == (2, ""), (cmd, r.stderr)
    rows = [line.split(" ") for line in r.stdout.splitlines()]
    assert rows and all(len(row) in (1, 2) and row[-1] in (row[0], "ARG") for row in rows), rows
    return {row[0]: len(row) == 2 for row in rows}


def test_every_listed_option_is_in_the_help_and_parses(lpx_bin):
    for cmd in commands(lpx_bin):
        opts = listing(lpx_bin, cmd)
        help_text = lpx(lpx_bin, *cmd, "--help").stdout
        for name in opts:
            assert re.search(rf"(^|[^\w-]){re.escape(name)}([^\w-]|$)", help_text, re.M), \
                f"lpx {' '.join(cmd)}: {name} is parsed but not in --help"
    # what the listing says matches what the parser does: a value-taking option without
    # its value is "needs a value", a flag is never that
    run = listing(lpx_bin, ["run"])
    assert run["-m"] and run["--max-tokens"] and run["--temperature"] and not run["--chat"]
    for name, takes in run.items():
        r = lpx(lpx_bin, "run", name)
        assert (f"{name}: needs a value" in r.stderr) == takes, (name, r.stderr)


def test_list_options_only_first(lpx_bin):
    r = lpx(lpx_bin, "run", "--chat", "--list-options")
    assert r.returncode == 2 and "unknown option '--list-options'" in r.stderr


@pytest.fixture(scope="module")
def complete(lpx_bin, tmp_path_factory):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    d = tmp_path_factory.mktemp("compl")
    script = d / "lpx.bash"
    r = lpx(lpx_bin, "completion", "bash")
    assert r.returncode == 0, r.stderr
    script.write_text(r.stdout)
    (d / "models").mkdir()
    (d / "models" / "tiny.gguf").write_text("")

    def run(*words):
        """COMPREPLY for the command line `words` (the last one being completed)."""
        quoted = " ".join("'" + w + "'" for w in words)
        prog = (f"source {script}; complete -p lpx >/dev/null; COMP_WORDS=({quoted}); "
                f"COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _lpx; printf '%s\\n' \"${{COMPREPLY[@]}}\"")
        r = subprocess.run(["bash", "--norc", "-c", prog], capture_output=True, text=True, cwd=d)
        assert r.returncode == 0, r.stderr
        return set(r.stdout.split())
    return run


def test_bash_completion(complete, lpx_bin):
    assert complete("lpx", "") >= {"run", "chat", "serve", "batch", "bench", "help", "completion"}
    assert complete("lpx", "s") == {"serve", "slice"}
    assert complete("lpx", "run", "--max") == {"--max-tokens", "--max-model-len"}
    assert complete("lpx", "serve", "--served") == {"--served-model-name"}
    assert complete("lpx", "bench", "-") == set(listing(lpx_bin, ["bench"])) | {"--help"}
    assert complete("lpx", "bench", "se") == {"serve"}
    assert complete("lpx", "bench", "serve", "--random-in") == {"--random-input-len"}
    assert "--random-input-len" not in complete("lpx", "bench", "--r")
    assert complete("lpx", "batch", "merge", "-") == {"-o", "--help"}
    assert complete("lpx", "help", "ben") == {"bench"}
    assert complete("lpx", "completion", "") == {"bash"}
    # an option's value and a plain argument complete file names
    assert complete("lpx", "run", "-m", "models/t") == {"models/tiny.gguf"}
    assert complete("lpx", "inspect", "models/") == {"models/tiny.gguf"}
    assert complete("lpx", "run", "--chat", "--te") == {"--temp", "--temperature"}


def test_completion_usage(lpx_bin):
    for args in (["completion"], ["completion", "zsh"]):
        r = lpx(lpx_bin, *args)
        assert r.returncode == 2 and r.stdout == "" and r.stderr.startswith("usage: lpx completion bash")
