"""Shared pytest fixtures: where the lpx binary and the default model are."""
import os
import pathlib
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The end-to-end tests compare generated text and tokens with transformers'
# greedy goldens (tests/fixtures/smollm2/greedy.json), which hold to a near-tie
# only with fp32 activations: every lpx they start runs the CPU backend's exact
# kernels unless a test sets LPX_CPU_TUNE itself. The default integer kernels
# are checked against the same goldens, with their own tolerance, by
# test_cpu_backend_smollm2.py, and kernel by kernel by tests/unit/test_cpu_qdot.c.
os.environ.setdefault("LPX_CPU_TUNE", "act=f32")


@pytest.fixture(scope="session")
def lpx_bin():
    path = ROOT / os.environ.get("LPX_BUILD", "build") / "lpx"
    assert path.exists(), f"{path} missing: run make first"
    return str(path)


@pytest.fixture(scope="session")
def smollm2():
    path = subprocess.run([str(ROOT / "scripts/fetch-model.sh"), "--print-path"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert os.path.exists(path), "default model missing: scripts/fetch-model.sh fetches it"
    return path


def pytest_configure(config):
    # `make asan` runs -m "not slow": tests that run the model for many seconds.
    config.addinivalue_line("markers", "slow: runs the model for seconds; skipped by make asan")


def pytest_sessionstart(session):
    session.config.lpx_started = time.time()


def pytest_terminal_summary(terminalreporter):
    # The screenshots and reports the tests wrote (tests/artifacts/), so a CI log
    # says where to look.
    art = ROOT / "tests" / "artifacts"
    start = terminalreporter.config.lpx_started
    fresh = sorted(p for p in art.glob("*") if p.stat().st_mtime >= start) if art.is_dir() else []
    if fresh:
        terminalreporter.write_sep("-", f"artifacts in {art}")
        for p in fresh:
            terminalreporter.write_line(str(p))
