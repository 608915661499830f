"""Opens an lpx HTML report (lpx bench --report, lpx bench serve --report) in headless
Chromium, measures what its inline SVG charts drew and keeps a screenshot in
tests/artifacts/."""
import contextlib
import pathlib

ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "tests" / "artifacts"


def assert_self_contained(text, allowed_urls=()):
    """No scripts, style sheets, images or anything else fetched from elsewhere."""
    for url in ("http://www.w3.org/2000/svg", *allowed_urls):
        text = text.replace(url, "")
    for bad in ("<script", "<link", "<img", "<iframe", "src=", "http://", "https://", "url("):
        assert bad not in text, bad


@contextlib.contextmanager
def chromium(html, screenshot):
    """Yields a Selenium driver with the report loaded; saves the screenshot
    (tests/artifacts/<screenshot>) when the checks in the block passed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,2400"):
        opts.add_argument(a)
    opts.binary_location = "/usr/bin/chromium"
    drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        drv.get(pathlib.Path(html).resolve().as_uri())
        yield drv
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        drv.save_screenshot(str(ARTIFACTS / screenshot))
    finally:
        drv.quit()


def charts(drv):
    """Per svg.chart, as laid out: width, height, and the bars (rect.bar: height of
    each) and lines (polyline.line: length of each) it drew."""
    return drv.execute_script("""
        return Array.from(document.querySelectorAll('svg.chart')).map(s => ({
            width: s.getBoundingClientRect().width,
            height: s.getBoundingClientRect().height,
            title: s.querySelector('text').textContent,
            bars: Array.from(s.querySelectorAll('rect.bar')).map(r => r.getBBox().height),
            lines: Array.from(s.querySelectorAll('polyline.line')).map(p => p.getTotalLength()),
            ticks: Array.from(s.querySelectorAll('text.tick')).map(t => t.textContent),
            // texts drawn (even in part) outside the chart: cut off
            cut: Array.from(s.querySelectorAll('text')).filter(t => {
                const r = t.getBoundingClientRect(), b = s.getBoundingClientRect();
                return r.left < b.left - 0.5 || r.right > b.right + 0.5 ||
                       r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5;
            }).map(t => t.textContent),
        }));""")


def assert_round_ticks(chart):
    """A chart's tick labels are round numbers: no exponent, and each axis's labels a
    multiple of one step of 1, 2 or 5 x 10^k; no text of it is cut off."""
    import math
    assert not chart["cut"], chart
    assert chart["ticks"], chart
    assert not [t for t in chart["ticks"] if "e" in t.lower()], chart["ticks"]
    # the x ticks come first, then the y ticks; each run increases
    vals = [float(t) for t in chart["ticks"]]
    runs, run = [], [vals[0]]
    for v in vals[1:]:
        if v > run[-1]:
            run.append(v)
        else:
            runs.append(run)
            run = [v]
    runs.append(run)
    for r in runs:
        assert len(r) >= 2, chart["ticks"]
        step = r[1] - r[0]
        mant = step / 10 ** math.floor(math.log10(step) + 1e-9)
        assert min(abs(mant - m) for m in (1, 2, 5)) < 1e-6, (step, chart["ticks"])
        assert all(abs((b - a) - step) < 1e-9 * max(1, step) for a, b in zip(r, r[1:])), r
