"""Shared pytest fixtures: where the lpx binary and the default model are."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


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
