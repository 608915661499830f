"""lpx bench -dp N: every test on N CPU engines at once, a row per engine and the
aggregate (tok/s summed), and with --dp-baseline the aggregate's ratio to N x engine 0
alone. Figures are checked for their arithmetic, never for speed. A two-layer slice of
the real SmolLM2 keeps the runs short."""
import json
import subprocess

import pytest

ARGS = ["-p", "8", "-n", "2", "-d", "8", "-b", "1,2", "-r", "1"]


def run(*args, timeout=600):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def small(lpx_bin, smollm2, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench_dp") / "s2.gguf"
    r = run(lpx_bin, "slice", "-m", smollm2, "--layers", "2", "-o", out)
    assert r.returncode == 0, r.stderr
    return out


def bench_json(lpx_bin, model, *extra):
    r = run(lpx_bin, "bench", "-m", model, *ARGS, "-o", "json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def by_test(res):
    """{test: ([engine rows in order], aggregate row)}, in the order printed."""
    out = {}
    for t in res["tests"]:
        rows, agg = out.setdefault(t["test"], ([], None))
        if t["engine"] == "all":
            assert agg is None, f"two aggregates of {t['test']}"
            out[t["test"]] = (rows, t)
        else:
            assert agg is None, f"an engine row of {t['test']} after its aggregate"
            rows.append(t)
    return out


@pytest.mark.parametrize("flags", [["--device", "cpu", "-t", "2", "-dp", "2"],
                                   ["--device", "cpu,cpu", "-t", "2"]])
def test_rows_per_engine_and_aggregate(lpx_bin, small, flags):
    res = bench_json(lpx_bin, small, *flags, "--dp-baseline")
    assert res["engines"] == "cpu,cpu" and res["device"] == "cpu"
    tests = by_test(res)
    assert list(tests) == ["pp8", "tg2", "decode B=2"]
    for name, (rows, agg) in tests.items():
        assert [r["engine"] for r in rows] == [0, 1], name
        for k in ("batch", "depth"):
            assert {r[k] for r in rows} == {agg[k]}, (name, k)
        assert all(r["tok_s"] > 0 for r in rows)
        # the aggregate is the sum (each figure printed to 0.01)
        assert agg["tok_s"] == pytest.approx(sum(r["tok_s"] for r in rows), abs=0.011)
        assert agg["ms_per_step"] == pytest.approx(sum(r["ms_per_step"] for r in rows) / 2,
                                                   abs=1e-3)
        assert agg["one_tok_s"] > 0
        assert agg["vs_one"] == pytest.approx(agg["tok_s"] / (2 * agg["one_tok_s"]), rel=1e-3)
        assert "vs_one" not in rows[0] and "one_tok_s" not in rows[0]


def test_no_baseline_leaves_the_ratio_out(lpx_bin, small):
    res = bench_json(lpx_bin, small, "--device", "cpu", "-t", "2", "-dp", "2")
    for rows, agg in by_test(res).values():
        assert len(rows) == 2 and agg["vs_one"] is None and agg["one_tok_s"] is None


def test_one_engine_output_unchanged(lpx_bin, small):
    res = bench_json(lpx_bin, small, "--device", "cpu", "-t", "1")
    assert "engines" not in res
    assert [t["test"] for t in res["tests"]] == ["pp8", "tg2", "decode B=2"]
    assert all("engine" not in t for t in res["tests"])


def test_md_and_csv(lpx_bin, small):
    r = run(lpx_bin, "bench", "-m", small, *ARGS, "--device", "cpu", "-t", "2", "-dp", "2",
            "--dp-baseline")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "engines at once: cpu,cpu" in lines
    assert "| test | tok/s | ± sd | ms/step | floor ms/step | % of floor | engine | vs N x one |" \
        in lines
    rows = [l for l in lines if l.startswith("| tg2 |")]
    assert [l.split("|")[7].strip() for l in rows] == ["0", "1", "all"]
    assert float(rows[2].split("|")[8]) > 0 and rows[0].split("|")[8].strip() == ""
    r = run(lpx_bin, "bench", "-m", small, *ARGS, "--device", "cpu", "-t", "2", "-dp", "2",
            "-o", "csv")
    assert r.returncode == 0, r.stderr
    head, *body = r.stdout.splitlines()
    assert head.endswith(",depth,engine,vs_one")
    assert [l.split(",")[-2] for l in body] == ["0", "1", "all"] * 3


@pytest.mark.parametrize("args,msg", [
    (["-dp", "3", "--device", "cpu,cpu"],
     "lpx bench: --data-parallel-size 3 contradicts --device cpu,cpu (2 devices)"),
    (["-dp", "4", "--device", "cpu", "-t", "2"], "lpx bench: --threads 2 is below"),
    (["-dp", "0"], "lpx bench: -dp: expected a whole number from 1 to 64"),
    (["--dp-baseline"], "lpx bench: --dp-baseline needs several engines (-dp N, N > 1)\n"),
])
def test_bad_flags(lpx_bin, small, args, msg):
    r = run(lpx_bin, "bench", "-m", small, *ARGS, *args)
    assert r.returncode == 2 and r.stderr.startswith(msg), r.stderr
