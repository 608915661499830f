"""Every file of the corrupt corpus (scripts/make-corrupt-corpus.py) makes
`lpx inspect` fail with exit status 1 and one line that names the problem."""
import json
import pathlib
import subprocess

import pytest

CORRUPT = pathlib.Path(__file__).resolve().parents[2] / "tests/fixtures/model/corrupt"
CASES = json.loads((CORRUPT / "cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["path"] for c in CASES])
def test_corrupt_model_is_refused(lpx_bin, case):
    path = CORRUPT / case["path"]
    assert path.exists()
    r = subprocess.run([lpx_bin, "inspect", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.startswith("lpx inspect: ") and r.stderr.count("\n") == 1, r.stderr
    assert case["keyword"] in r.stderr, r.stderr
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_corpus_covers_both_formats():
    gguf = [c for c in CASES if c["path"].endswith(".gguf")]
    assert len(gguf) >= 30 and len(CASES) - len(gguf) >= 20
