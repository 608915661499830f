"""Starts `lpx serve` on a free port for the tests and stops it at teardown."""
import re
import subprocess
import threading
import time

import httpx


class Server:
    """A running `lpx serve`; its stderr is collected in .log."""

    def __init__(self, lpx_bin, model, *args, api_key=None, name="smollm2"):
        # name None: the server's own default name (the file name without .gguf)
        cmd = [lpx_bin, "serve", "-m", model, "--port", "0",
               *(["--served-model-name", name] if name else []), "--max-model-len", "512", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key
        self.model = name
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.log = []
        ready = threading.Event()

        def reader():
            for line in self.proc.stderr:
                self.log.append(line)
                # Said once the model is loaded and the port bound.
                m = re.search(r"listening on http://([^:]+):(\d+)", line)
                if m:
                    self.url = f"http://{m.group(1)}:{m.group(2)}"
                    ready.set()
            ready.set()

        threading.Thread(target=reader, daemon=True).start()
        if not ready.wait(120) or not hasattr(self, "url"):
            self.stop()
            raise RuntimeError("lpx serve did not start:\n" + "".join(self.log))

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def post(self, path, body=None, **kw):
        return httpx.post(self.url + path, json=body, headers=self.headers(), timeout=120, **kw)

    def get(self, path):
        return httpx.get(self.url + path, headers=self.headers(), timeout=30)

    def metrics(self):
        """{name: value} of the unlabelled-by-gpu samples of /metrics."""
        from prometheus_client.parser import text_string_to_metric_families
        out = {}
        for fam in text_string_to_metric_families(self.get("/metrics").text):
            for s in fam.samples:
                out.setdefault(s.name, s.value)
        return out

    def wait_idle(self, timeout=60):
        """Polls /metrics until nothing runs, waits or holds KV; returns the last values.
        The timeout is only against a hang: tests assert on the values, not on time."""
        end = time.monotonic() + timeout
        while True:
            m = self.metrics()
            idle = (m["lpx:num_requests_running"] == 0 and m["lpx:num_requests_waiting"] == 0
                    and m["lpx:kv_cache_usage_perc"] == 0)
            if idle or time.monotonic() > end:
                return m
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
