import subprocess


def run(*args):
    return subprocess.run(list(args), capture_output=True, text=True)


def test_version(lpx_bin):
    r = run(lpx_bin, "--version")
    assert r.returncode == 0 and r.stdout.startswith("lpx ")


def test_unknown_command_is_usage_error(lpx_bin):
    r = run(lpx_bin, "frobnicate")
    assert r.returncode == 2 and "unknown command" in r.stderr
