"""lpx bench --report on the CPU backend with the real SmolLM2: the HTML file is
self-contained, its table holds the figures the same run printed as JSON, and it
renders in headless Chromium with bar heights in proportion to tok/s (screenshot:
tests/artifacts/bench_report.png)."""
import json
import subprocess

import pytest

from report_helpers import assert_round_ticks, assert_self_contained, charts, chromium


def run(*args):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)


def test_report(lpx_bin, smollm2, tmp_path):
    html = tmp_path / "bench.html"
    r = run(lpx_bin, "bench", "-m", smollm2, "-p", "16", "-n", "4", "-d", "8", "-b", "1,2,3",
            "-r", "2", "--device", "cpu", "-o", "json", "--report", html)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    tests = res["tests"]
    assert [t["test"] for t in tests] == ["pp16", "tg4", "decode B=2", "decode B=3"]
    assert_self_contained(html.read_text())
    with chromium(html, "bench_report.png") as drv:
        table = drv.execute_script(
            "return Array.from(document.querySelectorAll('#results tr')).slice(1)"
            ".map(r => Array.from(r.cells).map(c => c.textContent))")
        assert len(table) == len(tests)
        bw = res["read_bandwidth_GBps"]
        for row, t in zip(table, tests):
            assert row[0] == t["test"] and int(row[1]) == t["batch"]
            # Same numbers as the JSON, at the precision each prints.
            assert float(row[2]) == pytest.approx(t["tok_s"], abs=0.011)
            assert float(row[3]) == pytest.approx(t["tok_s_sd"], abs=0.011)
            assert float(row[4]) == pytest.approx(t["ms_per_step"], abs=1.1e-4)
            assert float(row[5]) == pytest.approx(t["floor_ms_per_step"], abs=1.1e-4)
            assert float(row[6]) == pytest.approx(t["pct_of_floor"], abs=0.11)
            # Effective bandwidth: the floor's bytes over the time taken.
            assert float(row[7]) == pytest.approx(t["pct_of_floor"] / 100 * bw, abs=0.06)
        clocks = drv.find_element("id", "clocks").text
        assert clocks.count("not available (no NVML)") == 2  # the CPU backend has no clocks
        got = charts(drv)
        # tok/s and % of floor per test; decode tok/s and ms/step over B (3 decode tests)
        assert [c["title"] for c in got] == [
            "Tokens/s per test (± sd)", "Share of the bandwidth floor",
            "Decode tokens/s over the batch size", "Decode step time over the batch size"]
        for c in got:
            assert c["width"] > 100 and c["height"] > 100, c
            assert_round_ticks(c)
        for c, key, rnd in ((got[0], "tok_s", 0.005), (got[1], "pct_of_floor", 0.05)):
            assert len(c["bars"]) == len(tests) and all(h > 0 for h in c["bars"])
            # Heights in proportion to the values: up to the SVG's 0.1 rounding and the
            # JSON's (rnd) carried through the ratio.
            top = max(range(len(tests)), key=lambda i: tests[i][key])
            b, H = tests[top][key], c["bars"][top]
            for h, t in zip(c["bars"], tests):
                tol = 0.2 + H * (rnd / b + t[key] * rnd / b**2)
                assert h == pytest.approx(t[key] / b * H, abs=tol), (key, c["bars"])
        assert all(len(c["lines"]) == 1 and c["lines"][0] > 0 for c in got[2:])


def test_help_and_errors(lpx_bin, smollm2, tmp_path):
    r = run(lpx_bin, "bench", "--help")
    assert r.returncode == 0
    assert "lpx bench serve" in r.stdout and "--report" in r.stdout
    r = run(lpx_bin, "bench", "-m", smollm2, "-p", "0", "-n", "1", "-d", "4", "-b", "1", "-r", "1",
            "--device", "cpu", "--report", tmp_path / "no" / "such" / "dir.html")
    assert r.returncode == 1
    assert r.stderr.startswith("lpx bench: ") and "dir.html" in r.stderr
    r = run(lpx_bin, "bench", "-m", smollm2, "--report")
    assert r.returncode == 2
