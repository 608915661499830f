"""The web UI of lpx serve in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) against the real SmolLM2 on the CPU: a streamed
chat reply and a dashboard update; stop; the conversations in localStorage (reload,
switch, delete); regenerate, edit and copy; Markdown with highlighted code; model
HTML that stays inert; a phone-sized screen. Screenshots go to tests/artifacts/
(listed at the end of the pytest run)."""
import json
import pathlib
import re
import shutil

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
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


def shot(browser, name):
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    browser.save_screenshot(str(path))
    print("screenshot:", path)


def finished(srv, reason=None):
    """Requests the server has finished, with that finish reason (None: any)."""
    from prometheus_client.parser import text_string_to_metric_families
    return sum(s.value for f in text_string_to_metric_families(srv.get("/metrics").text)
               for s in f.samples if s.name == "lpx:request_success_total"
               and reason in (None, s.labels["finished_reason"]))


def wait(browser, timeout=60):
    return WebDriverWait(browser, timeout, poll_frequency=0.05)


# Every body the page posts to /v1/chat/completions, kept in window.sent.
RECORD_REQUESTS = """
window.sent = [];
const f = window.fetch;
window.fetch = (url, o) => {
  if (String(url).endsWith('/v1/chat/completions')) window.sent.push(JSON.parse(o.body));
  return f(url, o);
};"""


def open_ui(browser, srv, chats=None):
    """The UI with the API key set and the conversations given (None: none kept)."""
    browser.get(srv.url + "/")
    browser.execute_script("localStorage.clear(); localStorage.setItem('lpx-api-key', 'ui-key');"
                           "if (arguments[0]) localStorage.setItem('lpx-chats', arguments[0]);",
                           json.dumps(chats) if chats else None)
    browser.refresh()
    wait(browser).until(lambda d: "smollm2" in d.find_element(By.ID, "model-name").text)
    browser.execute_script(RECORD_REQUESTS)


def set_param(browser, id_, value):
    e = browser.find_element(By.ID, id_)
    e.clear()
    e.send_keys(str(value))


def answer_done(d):
    return (d.find_elements(By.CSS_SELECTOR, ".msg.assistant")
            and not d.find_elements(By.CSS_SELECTOR, ".msg.streaming")
            and d.find_element(By.ID, "send").is_enabled())


def send(browser, text, max_tokens=8):
    set_param(browser, "temperature", 0)
    set_param(browser, "max-tokens", max_tokens)
    sent = browser.execute_script("return window.sent.length")
    browser.find_element(By.ID, "prompt").send_keys(text)
    browser.find_element(By.ID, "send").click()
    wait(browser).until(lambda d: d.execute_script("return window.sent.length") == sent + 1)
    wait(browser).until(answer_done)


def messages(browser):
    return browser.execute_script("return lpxChat.current().messages")


def conv_titles(browser):
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#conv-list .open")]


def test_ui_chat_streams_and_dashboard_updates(srv, browser):
    browser.get(srv.url + "/")
    browser.execute_script("localStorage.clear()")
    browser.refresh()
    assert browser.title == "lpx serve"
    key = browser.find_element(By.ID, "api-key")
    key.send_keys("ui-key")
    browser.execute_script("arguments[0].dispatchEvent(new Event('change'))", key)
    wait(browser).until(lambda d: "smollm2" in d.find_element(By.ID, "model-name").text)
    before = int(browser.find_element(By.ID, "dash-updated").get_attribute("data-count"))

    set_param(browser, "temperature", 0)
    set_param(browser, "max-tokens", 24)
    browser.find_element(By.ID, "prompt").send_keys("Name three colors.")
    # Every text the reply holds while it is marked streaming, recorded by the page
    # itself (polling from here could miss a short stream on a fast machine).
    browser.execute_script("""
        window.partials = [];
        new MutationObserver(() => {
            if (document.querySelector('.msg.assistant.streaming')) {
                const ms = lpxChat.current().messages;
                if (ms[ms.length - 1].content) window.partials.push(ms[ms.length - 1].content);
            }
        }).observe(document.getElementById('messages'),
                   {subtree: true, childList: true, characterData: true});""")
    browser.find_element(By.ID, "send").click()

    # Streamed: the reply is visible while it is still being written, and complete
    # at the end.
    wait(browser).until(answer_done)
    reply = browser.find_element(By.CSS_SELECTOR, ".msg.assistant")
    assert "error" not in reply.get_attribute("class")
    partials = browser.execute_script("return window.partials")
    final = messages(browser)[-1]["content"]
    assert partials and all(final.startswith(p) for p in partials)
    assert any(len(p) < len(final) for p in partials), partials  # text before the end
    shown = browser.execute_script("return arguments[0].querySelector('.body').textContent", reply)
    # shown as Markdown: the words, without the list's numbers
    assert re.findall(r"[A-Za-z]+", final) == re.findall(r"[A-Za-z]+", shown)
    assert conv_titles(browser) == ["Name three colors."]

    # The dashboard polls /metrics again and shows the finished request.
    count = lambda d: int(d.find_element(By.ID, "dash-updated").get_attribute("data-count"))
    wait(browser).until(lambda d: count(d) > before)
    done_at = count(browser)
    wait(browser).until(lambda d: count(d) > done_at + 1)
    assert float(browser.find_element(By.ID, "dash-done").text) >= 1
    assert float(browser.find_element(By.ID, "dash-gen").text) > 0
    assert browser.find_element(By.ID, "dash-running").text == "0"
    assert browser.find_element(By.ID, "dash-ttft50").text != "–"
    shot(browser, "serve_ui.png")


def test_ui_code_block_is_highlighted_and_copied(srv, browser):
    """A real answer with a fenced Python block: highlight.js's spans inside
    pre > code; Copy puts the Markdown source on the clipboard."""
    open_ui(browser, srv)
    send(browser, "Write a Python function that adds two numbers.", max_tokens=24)
    code = browser.find_element(By.CSS_SELECTOR, ".msg.assistant pre > code.hljs.language-python")
    keywords = [e.text for e in code.find_elements(By.CSS_SELECTOR, "span.hljs-keyword")]
    assert "def" in keywords and "return" in keywords, code.get_attribute("innerHTML")
    source = messages(browser)[-1]["content"]
    assert source.startswith("```python\ndef ")

    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": srv.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    copy = browser.find_element(By.CSS_SELECTOR, ".msg.assistant .actions .copy")
    copy.click()
    wait(browser).until(lambda d: copy.text == "Copied")
    browser.set_script_timeout(30)
    pasted = browser.execute_async_script(
        "navigator.clipboard.readText().then(arguments[0], e => arguments[0]('error ' + e))")
    assert pasted == source
    shot(browser, "serve_ui_code.png")


def test_ui_stop_marks_the_reply_and_reload_keeps_history(srv, browser):
    open_ui(browser, srv)
    aborted = finished(srv, "abort")
    set_param(browser, "temperature", 0)
    set_param(browser, "max-tokens", 400)
    browser.find_element(By.ID, "prompt").send_keys("Tell me a long story about a dragon.")
    browser.find_element(By.ID, "send").click()
    wait(browser).until(lambda d: d.execute_script(
        "const m = lpxChat.current().messages; return m.length == 2 && m[1].content.length > 20"))
    browser.find_element(By.ID, "stop").click()
    wait(browser).until(answer_done)
    assert browser.find_element(By.ID, "messages").get_attribute("aria-busy") == "false"
    msg = browser.find_element(By.CSS_SELECTOR, ".msg.assistant")
    assert "stopped" in msg.get_attribute("class").split()
    assert msg.find_element(By.CSS_SELECTOR, ".badge").text == "stopped"
    assert browser.find_element(By.ID, "chat-status").text == "stopped"
    stopped = messages(browser)
    assert stopped[1]["stopped"] is True and "finish" not in stopped[1]
    # the server cancelled the request when the browser closed the stream
    assert srv.wait_idle()["lpx:num_requests_running"] == 0
    assert finished(srv, "abort") == aborted + 1
    shot(browser, "serve_ui_stopped.png")

    browser.refresh()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    assert messages(browser) == stopped
    texts = [e.find_element(By.CSS_SELECTOR, ".body").text
             for e in browser.find_elements(By.CSS_SELECTOR, ".msg")]
    assert texts[0] == "Tell me a long story about a dragon."
    assert texts[1].split()[:3] == stopped[1]["content"].split()[:3]
    assert browser.find_element(By.CSS_SELECTOR, ".msg.assistant .badge").text == "stopped"
    assert conv_titles(browser) == ["Tell me a long story about a dragon."]


def test_ui_reload_during_an_answer_keeps_it_as_stopped(srv, browser):
    open_ui(browser, srv)
    aborted = finished(srv, "abort")
    set_param(browser, "temperature", 0)
    set_param(browser, "max-tokens", 400)
    browser.find_element(By.ID, "prompt").send_keys("Tell me a long story about a dragon.")
    browser.find_element(By.ID, "send").click()
    wait(browser).until(lambda d: d.execute_script(
        "const m = lpxChat.current().messages; return m.length == 2 && m[1].content.length > 20"))
    browser.refresh()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.assistant"))
    kept = messages(browser)
    assert kept[1]["stopped"] is True and len(kept[1]["content"]) > 20
    assert browser.find_element(By.CSS_SELECTOR, ".msg.assistant .badge").text == "stopped"
    assert srv.wait_idle()["lpx:num_requests_running"] == 0
    assert finished(srv, "abort") == aborted + 1


def test_ui_new_chat_during_an_answer_stops_it(srv, browser):
    open_ui(browser, srv)
    aborted = finished(srv, "abort")
    set_param(browser, "temperature", 0)
    set_param(browser, "max-tokens", 400)
    browser.find_element(By.ID, "prompt").send_keys("Tell me a long story about a dragon.")
    browser.find_element(By.ID, "send").click()
    wait(browser).until(lambda d: d.execute_script(
        "const m = lpxChat.current().messages; return m.length == 2 && m[1].content.length > 20"))
    browser.find_element(By.ID, "new-chat").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "send").is_enabled())
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    assert srv.wait_idle()["lpx:num_requests_running"] == 0
    assert finished(srv, "abort") == aborted + 1
    browser.find_elements(By.CSS_SELECTOR, "#conv-list .open")[1].click()
    kept = messages(browser)
    assert kept[1]["stopped"] is True and len(kept[1]["content"]) > 20
    assert browser.find_element(By.CSS_SELECTOR, ".msg.assistant .badge").text == "stopped"


def test_ui_conversations_switch_and_delete(srv, browser):
    open_ui(browser, srv)
    send(browser, "Hi")
    first = messages(browser)
    browser.find_element(By.ID, "new-chat").click()
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    send(browser, "Name a fruit.")
    assert conv_titles(browser) == ["Name a fruit.", "Hi"]
    assert browser.execute_script("return window.sent[1].messages") == [
        {"role": "user", "content": "Name a fruit."}]  # the new chat starts afresh

    browser.find_elements(By.CSS_SELECTOR, "#conv-list .open")[1].click()
    assert messages(browser) == first
    assert browser.find_element(By.CSS_SELECTOR, ".msg.user .body").text == "Hi"
    assert browser.find_element(By.CSS_SELECTOR, "#conv-list li.current .open").text == "Hi"
    browser.refresh()  # the chat shown is kept too
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".msg.user"))
    assert browser.find_element(By.CSS_SELECTOR, ".msg.user .body").text == "Hi"
    assert conv_titles(browser) == ["Name a fruit.", "Hi"]

    browser.find_elements(By.CSS_SELECTOR, "#conv-list .delete")[0].click()
    assert conv_titles(browser) == ["Hi"]
    browser.find_element(By.CSS_SELECTOR, "#conv-list .delete").click()
    assert conv_titles(browser) == ["New chat"]
    assert browser.find_elements(By.CSS_SELECTOR, ".msg") == []
    kept = json.loads(browser.execute_script("return localStorage.getItem('lpx-chats')"))
    assert [c["messages"] for c in kept["chats"]] == [[]]


def test_ui_regenerate_and_edit(srv, browser):
    open_ui(browser, srv)
    send(browser, "Name a color.")
    first = messages(browser)
    done = finished(srv)
    browser.find_element(By.CSS_SELECTOR, ".msg.assistant .regenerate").click()
    wait(browser).until(lambda d: d.execute_script("return window.sent.length") == 2)
    wait(browser).until(answer_done)
    # the last answer is replaced (greedy: by the same text), and the request held
    # the conversation without it
    assert messages(browser) == first
    assert len(browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")) == 1
    assert browser.execute_script("return window.sent[1].messages") == [
        {"role": "user", "content": "Name a color."}]
    assert finished(srv) == done + 1

    browser.find_element(By.CSS_SELECTOR, ".msg.user .edit").click()
    box = browser.find_element(By.CSS_SELECTOR, ".msg.user .edit-box")
    assert box.get_attribute("value") == "Name a color."
    box.clear()
    box.send_keys("Name an animal.")
    box.send_keys(Keys.ENTER)
    wait(browser).until(lambda d: d.execute_script("return window.sent.length") == 3)
    wait(browser).until(answer_done)
    edited = messages(browser)
    assert [m["role"] for m in edited] == ["user", "assistant"]
    assert edited[0]["content"] == "Name an animal." and edited[1]["content"]
    assert browser.execute_script("return window.sent[2].messages") == [
        {"role": "user", "content": "Name an animal."}]
    assert conv_titles(browser) == ["Name an animal."]


XSS = """Here is an image: <img src=x onerror="window.pwned='img'">
<script>window.pwned = 'script'</script>
<iframe src="javascript:parent.pwned='iframe'"></iframe>
<svg onload="window.pwned='svg'"><circle r=5></svg>
<details open ontoggle="window.pwned='details'"><summary>x</summary></details>

[a link](javascript:window.pwned='link') ![pic](x" onerror="window.pwned='alt')
<a href="javascript:window.pwned='a'">raw a</a> **bold** `<b>code</b>`
![a <b>picture</b>](https://example.com/p.png) [lpx](https://example.com/lpx)
<javascript:window.pwned='auto'> [enc](&#106;avascript:window.pwned='enc')
[tab](java	script:window.pwned='tab') [data](data:text/html,<script>parent.pwned='data'</script>)
[proto](//example.com/x)

```html
<img src=x onerror="window.pwned='code'">
```
"""

# Renders XSS with the page's own function, and, as the control that shows the
# payload would run if it were inserted as HTML, the same text through innerHTML into
# a detached element (an img there still loads and fails, and runs its onerror).
INERT = """
const done = arguments[arguments.length - 1];
const el = document.createElement('div');
el.id = 'xss';
lpxRender.markdown(el, arguments[0]);
document.getElementById('messages').appendChild(el);
window.control = 0;
document.createElement('div').innerHTML = '<img src=x onerror="window.control=1">';
const t0 = performance.now();
(function check() {
  if (window.control || performance.now() - t0 > 20000) done(window.control);
  else setTimeout(check, 20);
})();
"""


def inert_checks(browser, root):
    found = browser.execute_script("""
        const r = arguments[0], all = Array.from(r.querySelectorAll('*'));
        return {
          tags: all.map(e => e.tagName.toLowerCase()),
          on: all.flatMap(e => Array.from(e.attributes).map(a => a.name))
                 .filter(n => n.startsWith('on') || n === 'src' || n === 'style'),
          links: Array.from(r.querySelectorAll('a')).map(a => [a.textContent,
              a.getAttribute('href'), a.getAttribute('target'), a.getAttribute('rel')]),
          text: r.textContent,
          pwned: window.pwned === undefined ? null : window.pwned,
        };""", root)
    assert found["pwned"] is None
    assert not {"img", "script", "iframe", "svg", "details"} & set(found["tags"]), found["tags"]
    assert found["on"] == []
    # javascript: links lose their href; an image is a link to it, never loaded
    safe = [["lpx", "https://example.com/lpx", "_blank", "noopener noreferrer"],
            ["a <b>picture</b>", "https://example.com/p.png", "_blank", "noopener noreferrer"]]
    assert sorted(l for l in found["links"] if l[1]) == sorted(safe), found["links"]
    # what the model wrote is shown, as text
    assert "<img src=x onerror=\"window.pwned='img'\">" in found["text"]
    assert "<script>window.pwned = 'script'</script>" in found["text"]
    assert "strong" in found["tags"] and "<b>code</b>" in found["text"]
    return found


def test_ui_model_html_stays_inert(srv, browser):
    """An answer holding HTML and javascript: URLs, rendered by the page's own
    function and by the page from a kept conversation: nothing runs or loads, no
    event attribute or script URL survives, and the text is shown as written."""
    open_ui(browser, srv)
    browser.set_script_timeout(30)
    assert browser.execute_async_script(INERT, XSS) == 1
    inert_checks(browser, browser.find_element(By.ID, "xss"))

    chats = {"current": "x", "chats": [{"id": "x", "title": "xss", "messages": [
        {"role": "user", "content": "<img src=x onerror=\"window.pwned='user'\">"},
        {"role": "assistant", "content": XSS}]}]}
    open_ui(browser, srv, chats)
    assert browser.execute_async_script(INERT, "") == 1
    found = inert_checks(browser, browser.find_element(By.CSS_SELECTOR, ".msg.assistant .body"))
    assert "code" in found["tags"]
    user = browser.find_element(By.CSS_SELECTOR, ".msg.user .body")
    assert user.text == "<img src=x onerror=\"window.pwned='user'\">"
    assert browser.execute_script("return window.pwned === undefined")
    shot(browser, "serve_ui_xss.png")


def test_ui_without_marked_shows_plain_text(srv, browser):
    """A build without Debian's marked and highlight.js (here: the browser refuses
    vendor/): answers are shown as the plain text they are, still inert."""
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["*/vendor/*"]})
    try:
        chats = {"current": "x", "chats": [{"id": "x", "title": "plain", "messages": [
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": XSS}]}]}
        open_ui(browser, srv, chats)
        assert browser.execute_script("return lpxRender.enabled") is False
        body = browser.find_element(By.CSS_SELECTOR, ".msg.assistant .body")
        assert "plain" in body.get_attribute("class").split()
        assert browser.execute_script("return arguments[0].textContent", body) == XSS
        assert browser.execute_script("return arguments[0].children.length", body) == 0
        send(browser, "Hi")  # and the chat works
        assert messages(browser)[-1]["content"]
        assert browser.execute_script("return window.pwned === undefined")
    finally:
        browser.execute_cdp_cmd("Network.setBlockedURLs", {"urls": []})
        browser.execute_cdp_cmd("Network.disable", {})


LONG = {"current": "p", "chats": [{"id": "p", "title": "a long line", "messages": [
    {"role": "user", "content": "Show me a long line " + "x" * 200},
    {"role": "assistant", "content": "```python\nprint('" + "a" * 300 + "')\n```\n\n"
     "https://example.com/" + "b" * 200 + "\n\n| a | b |\n|---|---|\n| " + "c" * 150 + " | d |"}]}]}


def test_ui_phone_width_has_no_horizontal_scroll(srv, browser):
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 3, "mobile": True})
    try:
        open_ui(browser, srv, LONG)
        send(browser, "Hi")
        page = browser.execute_script("""
            const e = document.documentElement, s = getComputedStyle(e);
            return {inner: window.innerWidth, scroll: e.scrollWidth,
                    scheme: s.colorScheme,
                    bar: getComputedStyle(document.getElementById('messages')).scrollbarColor};""")
        assert page["inner"] == 390, page  # the viewport meta: the layout is the phone's width
        assert page["scroll"] <= page["inner"], page
        assert page["scheme"] == "dark" and page["bar"] != "auto", page
        for sel in ("#send", "#prompt", "#new-chat", ".msg.assistant .regenerate"):
            r = browser.find_element(By.CSS_SELECTOR, sel).rect
            assert r["x"] >= 0 and r["x"] + r["width"] <= 390, (sel, r)
        shot(browser, "serve_ui_phone.png")
        # the long code line scrolls inside its block
        pre = browser.execute_script("""
            const c = document.querySelector('.msg pre > code');
            return [c.scrollWidth, c.clientWidth];""")
        assert pre[0] > pre[1]
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_ui_has_a_favicon_and_no_outside_assets(srv, browser):
    for path in ("/favicon.ico", "/favicon.svg"):
        r = httpx.get(srv.url + path)
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        assert r.text.startswith("<svg")
    browser.get(srv.url + "/")
    icon = browser.find_element(By.CSS_SELECTOR, "link[rel=icon]").get_attribute("href")
    assert icon == srv.url + "/favicon.svg"
    # every script and style sheet comes from lpx itself, Debian's marked and
    # highlight.js included
    index = httpx.get(srv.url + "/").text
    refs = re.findall(r'(?:src|href)="([^"]+)"', index)
    assert "vendor/marked.js" in refs and "vendor/highlight.js" in refs
    for ref in refs:
        assert "//" not in ref, ref
        r = httpx.get(srv.url + "/" + ref)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache", ref
        # asked again with its ETag: a 304 without the body (highlight.js is 846 kB)
        again = httpx.get(srv.url + "/" + ref, headers={"If-None-Match": r.headers["etag"]})
        assert again.status_code == 304 and again.content == b"", ref
        other = httpx.get(srv.url + "/" + ref, headers={"If-None-Match": '"0000"'})
        assert other.status_code == 200 and other.content == r.content, ref
    assert browser.execute_script("return lpxRender.enabled && typeof hljs.highlight")


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
