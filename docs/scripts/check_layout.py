"""Check the built documentation in headless Chromium at a normal screen width.

    python docs/scripts/check_layout.py                  # build the site, check every page
    python docs/scripts/check_layout.py --site site/     # check an already built site
    python docs/scripts/check_layout.py --width 1024

Each page is opened at ``--width`` px (1280 by default) and measured: an element of the page's
content that ends right of the content column (or of a box that clips it) without a box that
scrolls sideways around it is *cut off*; the page as a whole must not scroll sideways. Every
picture is listed with the scale it is drawn at (shown width / natural width) and whether a
link opens it at full size. Prints one line per page and exits 1 when something is cut off or
a table needs a scroll bar.

Needs Chromium (Debian: ``apt-get install -y chromium``). Boxes that scroll sideways are listed too
(``scrolled``): code may, a table should fit the page. The pages are served from a local
HTTP server and measured in one browser run: a harness page loads each into an iframe of the
checked width and writes its findings into the DOM, which ``--dump-dom`` prints.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
HARNESS = "_layout_harness.html"

MEASURE_JS = r"""
function describe(el) {
  let text = el.tagName.toLowerCase();
  if (el.id) text += "#" + el.id;
  if (el.className && typeof el.className === "string") text += "." + el.className.trim().split(/\s+/).join(".");
  const words = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 50);
  return words ? `${text} "${words}"` : text;
}
function measure(doc) {
  const win = doc.defaultView, root = doc.documentElement;
  const cut = [];
  if (root.scrollWidth > root.clientWidth + 1)
    cut.push(`the page scrolls sideways (${root.scrollWidth}px wide in ${root.clientWidth}px)`);
  const content = doc.querySelector(".md-content__inner") || doc.querySelector("[role=main]") || doc.body;
  // Material lets tables and code bleed into the column's side margins: the column is the
  // content area around the text.
  const column = (doc.querySelector(".md-content") || content).getBoundingClientRect();
  const reported = [];
  for (const el of content.querySelectorAll("*")) {
    if (reported.some(r => r.contains(el))) continue;
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height) continue;
    let limit = column.right, scrolls = false;
    for (let a = el.parentElement; a && a !== content; a = a.parentElement) {
      const overflow = win.getComputedStyle(a).overflowX;
      if (overflow === "auto" || overflow === "scroll") { scrolls = true; break; }
      if (overflow === "hidden" || overflow === "clip") { limit = a.getBoundingClientRect().right; break; }
    }
    if (!scrolls && box.right > limit + 1) {
      reported.push(el);
      cut.push(`${describe(el)} ends at ${Math.round(box.right)}px, past ${Math.round(limit)}px`);
    }
  }
  const scrolled = [];
  for (const el of content.querySelectorAll("*")) {
    const overflow = win.getComputedStyle(el).overflowX;
    if ((overflow === "auto" || overflow === "scroll") && el.scrollWidth > el.clientWidth + 1) {
      const holds = tag => el.tagName === tag.toUpperCase() || el.querySelector(tag);
      const inner = holds("table") ? "table" : holds("img") ? "picture" : holds("code") ? "code" : "other";
      scrolled.push({what: inner, element: describe(el), hidden: el.scrollWidth - el.clientWidth});
    }
  }
  const images = [...content.querySelectorAll("img")].map(img => {
    const link = img.closest("a");
    return {src: img.getAttribute("src"), natural: img.naturalWidth,
            shown: Math.round(img.getBoundingClientRect().width),
            full_size_link: !!(link && link.getAttribute("href") === img.getAttribute("src"))};
  });
  return {cut, scrolled, images, column: Math.round(column.width)};
}
async function run(pages, width, height) {
  const frame = document.createElement("iframe");
  frame.style.width = width + "px"; frame.style.height = height + "px"; frame.style.border = "0";
  document.body.appendChild(frame);
  const report = {};
  for (const page of pages) {
    await new Promise(resolve => { frame.onload = resolve; frame.src = page; });
    const doc = frame.contentDocument;
    await Promise.all([...doc.images].map(img => img.complete ? null :
      new Promise(resolve => { img.onload = img.onerror = resolve; })));
    if (doc.fonts) await doc.fonts.ready;
    report[page] = measure(doc);
  }
  const out = document.createElement("pre");
  out.id = "layout-report";
  out.textContent = JSON.stringify(report);
  document.body.appendChild(out);
}
"""


def find_browser() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def build_site(target: Path) -> None:
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                    str(target)], cwd=ROOT, check=True, capture_output=True, timeout=300,
                   env=dict(os.environ, MPLBACKEND="Agg", NO_MKDOCS_2_WARNING="1"))


def site_pages(site: Path) -> list[str]:
    """URL paths of the site's pages (``index.html`` of each folder; not 404 or assets)."""
    pages = []
    for path in sorted(site.rglob("index.html")):
        rel = path.relative_to(site).as_posix()
        if not rel.startswith(("assets/", "search/")):
            pages.append("/" + rel)
    return pages


@contextlib.contextmanager
def serve(directory: Path):
    """A local HTTP server for ``directory`` on a free port; yields its base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def measure_site(site: Path, width: int = 1280, height: int = 900, browser=None) -> dict:
    """``{page: {"cut": [...], "images": [...], "column": px}}`` for every page of ``site``."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found (Debian: apt-get install -y chromium)")
    pages = site_pages(site)
    harness = site / HARNESS
    harness.write_text(
        "<!doctype html><html><body style='margin:0'><script>" + MEASURE_JS
        + f"run({json.dumps(pages)}, {width}, {height});</script></body></html>")
    try:
        with serve(site) as base, tempfile.TemporaryDirectory() as profile:
            result = subprocess.run(
                [browser, "--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-extensions", "--no-first-run",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}",
                 f"--window-size={width + 40},{height}", "--virtual-time-budget=120000",
                 "--dump-dom", f"{base}/{HARNESS}"],
                capture_output=True, text=True, timeout=300)
    finally:
        harness.unlink()
    found = re.search(r'<pre id="layout-report">(.*?)</pre>', result.stdout, re.DOTALL)
    if found is None:
        raise RuntimeError(f"the browser wrote no report (exit {result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return json.loads(html.unescape(found.group(1)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one)")
    parser.add_argument("--width", type=int, default=1280)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build_site(site)
        report = measure_site(site, args.width)
    failed = False
    for page, found in report.items():
        problems = found["cut"] + scrolled_tables(found)
        pictures = ", ".join(f"{Path(i['src']).name} at {i['shown'] / i['natural']:.0%}"
                             + (" (linked)" if i["full_size_link"] else "")
                             for i in found["images"] if i["natural"])
        code = [box["hidden"] for box in found["scrolled"] if box["what"] == "code"]
        print(f"{page:32} column {found['column']}px  "
              + (f"{len(problems)} problem(s)" if problems else "ok")
              + (f"; {len(code)} code block(s) scroll, by up to {max(code)}px" if code else "")
              + (f"; pictures: {pictures}" if pictures else ""))
        for problem in problems:
            print(f"    {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


def scrolled_tables(found) -> list[str]:
    """The tables of a page's report that hide part of themselves behind a scroll bar."""
    return [f"{box['element']} hides {box['hidden']}px behind a scroll bar"
            for box in found["scrolled"] if box["what"] == "table"]


if __name__ == "__main__":
    sys.exit(main())
