"""lpx serve --metrics-compat vllm: the three gauges the Gateway API Inference Extension's
endpoint pickers scrape by default, under vLLM's names, with lpx's values (docs/deploy.md)."""
import subprocess
import threading

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from serve_helpers import Server

COMPAT = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")


def families(srv):
    return {f.name: f for f in text_string_to_metric_families(httpx.get(srv.url + "/metrics").text)}


def values(fams, ns):
    out = {}
    for n in COMPAT:
        (s,) = fams[f"{ns}:{n}"].samples
        assert s.labels == {"model_name": "smollm2"} and fams[f"{ns}:{n}"].type == "gauge"
        out[n] = s.value
    return out


def test_vllm_names_carry_lpx_values(lpx_bin, smollm2):
    # one batch slot: a second request waits, so every gauge is non-zero at once
    srv = Server(lpx_bin, smollm2, "--metrics-compat", "vllm", "--max-num-seqs", "1",
                 "-t", "1")
    try:
        idle = families(srv)
        assert values(idle, "vllm") == values(idle, "lpx") == dict.fromkeys(COMPAT, 0)
        body = {"prompt": "Once upon a time", "max_tokens": 300, "ignore_eos": True}
        done = []
        ts = [threading.Thread(target=lambda: done.append(srv.post("/v1/completions", body)))
              for _ in range(2)]
        for t in ts:
            t.start()
        busy = None
        for _ in range(2000):
            f = families(srv)
            lpx, vllm = values(f, "lpx"), values(f, "vllm")
            # one render holds one snapshot of the engine: the names agree in every scrape
            assert lpx == vllm
            if lpx["num_requests_running"] == 1 and lpx["num_requests_waiting"] == 1:
                busy = lpx
                break
        assert busy and 0 < busy["kv_cache_usage_perc"] < 1, busy
        for t in ts:
            t.join(120)
        assert [r.status_code for r in done] == [200, 200]
        srv.wait_idle()
        # only the three gauges are copied: the rest stays under lpx's names
        assert {n for n in families(srv) if n.startswith("vllm:")} == {f"vllm:{n}" for n in COMPAT}
    finally:
        srv.stop()


def test_default_has_no_vllm_names(lpx_bin, smollm2):
    srv = Server(lpx_bin, smollm2, "-t", "1")
    try:
        assert not [n for n in families(srv) if n.startswith("vllm:")]
    finally:
        srv.stop()


@pytest.mark.parametrize("value", ["sglang", "", "VLLM"])
def test_unknown_compat_is_usage_error(lpx_bin, smollm2, value):
    r = subprocess.run([lpx_bin, "serve", "-m", smollm2, "--metrics-compat", value],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert r.stderr == f"lpx serve: --metrics-compat: expected vllm (got '{value}')\n"


def test_docs_name_exactly_the_vllm_names_served():
    """docs/server.md's metrics section names as vLLM's exactly the ones served under
    --metrics-compat vllm (the test above: no other vllm:* family exists)."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs/server.md").read_text()
    assert set(re.findall(r"vllm:[a-z_]+", text)) == {f"vllm:{n}" for n in COMPAT}
    assert "dashboards built for vLLM read lpx" not in text
