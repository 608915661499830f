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
        }));""")
