"""lpx serve --fallback-model on the CPU (real SmolLM2 as the main model, a q8_0 copy made
by `lpx quantize` as the fallback): with --max-num-seqs 1 a burst of concurrent requests
saturates the main engine, the overload rule sends the rest to the fallback (the response
names it), and once the queue has drained and the cooldown passed a request is answered
by the main model again; no request is lost, the metrics agree with what the clients
saw, every switch is logged, and a request naming a model is pinned to it."""
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from serve_helpers import Server

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time",
           "The three primary colors are", "Water boils at", "The largest planet is",
           "In 1492,", "A haiku about the sea:"]


@pytest.fixture(scope="module")
def q8(lpx_bin, smollm2, tmp_path_factory):
    out = tmp_path_factory.mktemp("fb") / "smollm2-q8.gguf"
    r = subprocess.run([lpx_bin, "quantize", "-m", smollm2, "-o", str(out), "--type", "q8_0"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return str(out)


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2, q8):
    s = Server(lpx_bin, smollm2, "--device", "cpu", "--max-num-seqs", "1",
               "--fallback-model", q8, "--fallback-when", "queue>0",
               "--fallback-cooldown", "0.5")
    yield s
    s.stop()


def complete(srv, prompt, **kw):
    r = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def fallback_metrics(srv):
    m = srv.metrics()
    return (m["lpx:fallback_requests_total"], m["lpx:fallback_switches_total"],
            m["lpx:fallback_active"])


def test_models_and_listening_line(srv):
    assert any("fallback model smollm2-q8 (" in l for l in srv.log), srv.log
    ids = [m["id"] for m in srv.get("/v1/models").json()["data"]]
    assert ids == ["smollm2", "smollm2-q8"]
    assert fallback_metrics(srv) == (0, 0, 0)


def test_pinning(srv):
    srv.wait_idle()
    main = complete(srv, PROMPTS[0], model="smollm2")
    fb = complete(srv, PROMPTS[0], model="smollm2-q8")
    auto = complete(srv, PROMPTS[0])
    assert main["model"] == "smollm2" and fb["model"] == "smollm2-q8"
    assert auto["model"] == "smollm2"  # idle: the main model
    assert main["choices"][0]["text"] == auto["choices"][0]["text"]
    assert fb["choices"][0]["text"]  # the q8_0 copy's own greedy text
    # pinned requests are not the overload rule's: not counted
    assert fallback_metrics(srv)[0] == 0
    r = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1, "model": "other"})
    assert r.status_code == 404 and "'smollm2' and 'smollm2-q8'" in r.text
    tok = srv.post("/tokenize", {"prompt": PROMPTS[1], "model": "smollm2-q8"})
    assert tok.status_code == 200 and tok.json()["count"] > 0


def test_overload_goes_to_fallback_and_back(srv):
    srv.wait_idle()
    before = fallback_metrics(srv)
    assert before[2] == 0
    # 8 at once on one sequence slot: the main engine runs one, one more waits (the
    # first look that sees it switches), the rest go to the fallback.
    with ThreadPoolExecutor(len(PROMPTS)) as ex:
        futs = [ex.submit(complete, srv, p, max_tokens=24) for p in PROMPTS]
        time.sleep(0.02)
        busy = srv.metrics()
        pinned = ex.submit(complete, srv, PROMPTS[0], model="smollm2").result()
        got = [f.result() for f in futs]
    assert pinned["model"] == "smollm2"  # pinned to the main model even while overloaded
    assert busy["lpx:fallback_num_requests_running"] <= 1  # its one sequence slot
    by = [g["model"] for g in got]
    assert all(g["choices"][0]["text"] for g in got)  # every request answered with text
    assert "smollm2-q8" in by and "smollm2" in by, by
    sent = by.count("smollm2-q8")
    print("answered by", by)
    after = fallback_metrics(srv)
    assert after[0] - before[0] == sent  # the counter is what the clients saw
    assert after[1] - before[1] >= 1
    assert any("fallback on (queue" in l and "go to smollm2-q8" in l for l in srv.log)
    # Load gone: after the cooldown the next request is the main model's again.
    srv.wait_idle()
    srv.metrics()  # a look that finds the rule clear starts the cooldown
    time.sleep(0.7)
    back = complete(srv, PROMPTS[1])
    assert back["model"] == "smollm2"
    final = fallback_metrics(srv)
    assert final[2] == 0 and final[1] - before[1] == 2 and final[0] == after[0]
    m = srv.metrics()
    assert m["lpx:fallback_num_requests_running"] == 0 == m["lpx:fallback_kv_cache_usage_perc"]
    assert any("fallback off (no term held for 0.5 s): new requests go to smollm2" in l
               for l in srv.log), srv.log
    logged = [l for l in srv.log if "model=smollm2-q8" in l and "/v1/completions 200" in l]
    assert len(logged) >= sent


def test_streaming_on_fallback_names_it(srv):
    r = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                         "max_tokens": 4, "stream": True,
                                         "model": "smollm2-q8"})
    assert r.status_code == 200
    chunks = [l for l in r.text.splitlines() if l.startswith("data: {")]
    assert chunks and all('"model":"smollm2-q8"' in c for c in chunks)


@pytest.mark.parametrize("args,message", [
    (["--fallback-when", "queue>1"], "--fallback-name and --fallback-when need --fallback-model"),
    (["--fallback-model", "M", "--fallback-when", "queue>x"], "queue>x: expected one integer"),
    (["--fallback-model", "M", "--fallback-when", "kv>1.5"], "kv>1.5: expected one number in [0, 1)"),
    (["--fallback-model", "M", "--fallback-when", "load>3"], "unknown term 'load'"),
    (["--fallback-model", "M", "--fallback-when", "queue>1,queue>2"], "queue>2: expected one"),
    (["--fallback-model", "M", "--fallback-when", "queue>1,"], "a trailing comma"),
    (["--fallback-model", "M", "--fallback-cooldown", "-1"], "--fallback-cooldown"),
    (["--fallback-model", "M", "--fallback-name", "smollm2"], "is the main model's name"),
])
def test_usage_errors(lpx_bin, smollm2, args, message):
    r = subprocess.run([lpx_bin, "serve", "-m", smollm2, "--served-model-name", "smollm2",
                        "--port", "0", *[smollm2 if a == "M" else a for a in args]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr
    assert "loading" not in r.stderr  # refused before any model is loaded
