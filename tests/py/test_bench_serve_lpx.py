"""lpx bench serve against lpx serve with the real SmolLM2: every request succeeds,
prompts have exactly --input-len tokens (through /tokenize and /detokenize), and the
token totals equal the usage fields and lpx serve's /metrics counters. Skipped while
the lpx binary has no serve command."""
import json
import re
import socket
import subprocess
import time
import urllib.request

import pytest


def counters(url):
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    out = {}
    for name in ("prompt_tokens_total", "generation_tokens_total"):
        m = re.search(rf"^lpx:{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
        out[name] = float(m.group(1)) if m else None
    return out


@pytest.fixture()
def lpx_server(lpx_bin, smollm2):
    if subprocess.run([lpx_bin, "serve", "--help"], capture_output=True).returncode != 0:
        pytest.skip("this lpx has no serve command")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([lpx_bin, "serve", "-m", smollm2, "--port", str(port), "-t", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                if urllib.request.urlopen(url + "/health", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.25)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_against_lpx_serve(lpx_bin, lpx_server, tmp_path):
    before = counters(lpx_server)
    out_json = tmp_path / "run.json"
    r = subprocess.run([lpx_bin, "bench", "serve", "--url", lpx_server, "--num-prompts", "4",
                        "--input-len", "16", "--output-len", "8", "--max-concurrency", "2",
                        "--json", str(out_json)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "approximate" not in r.stderr
    run = json.loads(out_json.read_text())["runs"][0]
    assert run["completed"] == 4 and run["failed"] == 0
    for q in run["requests"]:
        # ignore_eos: exactly max_tokens; one text chunk per token for lpx serve.
        assert q["input_tokens"] == 16 and q["output_tokens"] == 8, q
        assert len(q["chunk_times"]) == 8
    after = counters(lpx_server)
    assert after["prompt_tokens_total"] - before["prompt_tokens_total"] == \
        run["total_input_tokens"] == 64
    assert after["generation_tokens_total"] - before["generation_tokens_total"] == \
        run["total_output_tokens"] == 32
    # random prompts share no block; the hit rate is still reported
    assert 0 <= run["prefix_cache_hit_rate"] <= 1
    assert "Prefix cache hit rate (%):" in r.stdout


def test_prefix_cache_hit_rate(lpx_bin, lpx_server, tmp_path):
    """A dataset whose prompts share a long prefix, one request at a time: the hit
    rate is the server's hits over its queries during the run."""
    shared = " ".join(f"rule {i} says the answer is short." for i in range(12))
    ds = tmp_path / "ds.jsonl"
    ds.write_text("".join(json.dumps({"prompt": f"{shared} Question {i}?", "output_len": 2}) + "\n"
                          for i in range(3)))
    text = urllib.request.urlopen(lpx_server + "/metrics", timeout=10).read().decode()
    get = lambda t, n: float(re.search(rf"^lpx:{n}(?:{{[^}}]*}})? (\S+)$", t, re.M).group(1))
    q0, h0 = get(text, "prefix_cache_queries_total"), get(text, "prefix_cache_hits_total")
    out_json = tmp_path / "run.json"
    r = subprocess.run([lpx_bin, "bench", "serve", "--url", lpx_server, "--dataset", str(ds),
                        "--max-concurrency", "1", "--json", str(out_json)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    text = urllib.request.urlopen(lpx_server + "/metrics", timeout=10).read().decode()
    q1, h1 = get(text, "prefix_cache_queries_total"), get(text, "prefix_cache_hits_total")
    run = json.loads(out_json.read_text())["runs"][0]
    assert h1 > h0 and run["prefix_cache_hit_rate"] == pytest.approx((h1 - h0) / (q1 - q0))
