"""The web UI of lpx serve in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium): a streamed chat reply and a dashboard
update. The screenshot is kept in tests/artifacts/."""
import pathlib
import shutil

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from serve_helpers import Server

ARTIFACTS = pathlib.Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="module")
def srv(lpx_bin, smollm2):
    s = Server(lpx_bin, smollm2, api_key="ui-key")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    driver_path = shutil.which("chromedriver")
    assert driver_path, "chromedriver missing: scripts/install-deps.sh --test installs chromium-driver"
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,900"):
        opts.add_argument(a)
    chromium = shutil.which("chromium")
    if chromium:
        opts.binary_location = chromium
    d = webdriver.Chrome(service=Service(driver_path), options=opts)
    yield d
    d.quit()


def test_ui_chat_streams_and_dashboard_updates(srv, browser):
    browser.get(srv.url + "/")
    wait = WebDriverWait(browser, 60, poll_frequency=0.05)
    assert browser.title == "lpx serve"
    key = browser.find_element(By.ID, "api-key")
    key.send_keys("ui-key")
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    wait.until(lambda d: "smollm2" in d.find_element(By.ID, "model-name").text)
    before = int(browser.find_element(By.ID, "dash-updated").get_attribute("data-count"))

    browser.find_element(By.ID, "temperature").clear()
    browser.find_element(By.ID, "temperature").send_keys("0")
    browser.find_element(By.ID, "max-tokens").clear()
    browser.find_element(By.ID, "max-tokens").send_keys("24")
    browser.find_element(By.ID, "prompt").send_keys("Name three colors.")
    # Every text the reply shows while it is marked streaming, recorded by the page
    # itself (polling from here could miss a short stream on a fast machine).
    browser.execute_script("""
        window.partials = [];
        new MutationObserver(() => {
            const m = document.querySelector('.msg.assistant.streaming');
            if (m && m.textContent) window.partials.push(m.textContent);
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true});""")
    browser.find_element(By.ID, "send").click()

    # Streamed: the reply is visible while it is still being written, and complete
    # at the end.
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant.done"))
    reply = browser.find_element(By.CSS_SELECTOR, ".msg.assistant")
    assert "error" not in reply.get_attribute("class")
    partials = browser.execute_script("return window.partials")
    final = browser.execute_script("return arguments[0].textContent", reply)
    assert partials and all(final.startswith(p) for p in partials)
    assert any(len(p) < len(final) for p in partials), partials  # text before the end

    # The dashboard polls /metrics again and shows the finished request.
    count = lambda d: int(d.find_element(By.ID, "dash-updated").get_attribute("data-count"))
    wait.until(lambda d: count(d) > before)
    done_at = count(browser)
    wait.until(lambda d: count(d) > done_at + 1)
    assert float(browser.find_element(By.ID, "dash-done").text) >= 1
    assert float(browser.find_element(By.ID, "dash-gen").text) > 0
    assert browser.find_element(By.ID, "dash-running").text == "0"
    assert browser.find_element(By.ID, "dash-ttft50").text != "–"
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "serve_ui.png"))


def test_ui_has_a_favicon(srv, browser):
    import httpx
    for path in ("/favicon.ico", "/favicon.svg"):
        r = httpx.get(srv.url + path)
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        assert r.text.startswith("<svg")
    browser.get(srv.url + "/")
    icon = browser.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
    assert icon == srv.url + "/favicon.svg"


FETCH = """
const [url, key, done] = arguments;
fetch(url + "/v1/chat/completions", {method: "POST",
      headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json"},
      body: JSON.stringify({messages: [{role: "user", content: "hi"}], max_tokens: 2})})
  .then(r => r.json()).then(j => done("ok " + j.object), e => done("blocked " + e));
"""


def test_cors_in_the_browser(lpx_bin, smollm2, srv, browser):
    """A page of another origin: the browser blocks its calls unless --allowed-origins
    names that origin (the preflight with Authorization is answered then)."""
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<!doctype html><title>other site</title>")

        def log_message(self, *a):
            pass

    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    origin = "http://127.0.0.1:%d" % site.server_address[1]
    allowed = Server(lpx_bin, smollm2, "--allowed-origins", origin, api_key="ui-key")
    try:
        browser.get(origin + "/")
        browser.set_script_timeout(60)
        assert browser.execute_async_script(FETCH, srv.url, "ui-key").startswith("blocked ")
        assert browser.execute_async_script(FETCH, allowed.url, "ui-key") == "ok chat.completion"
    finally:
        allowed.stop()
        site.shutdown()
        site.server_close()
