"""Check the built documentation in headless Chromium at a normal screen width.

    python docs/scripts/check_layout.py                  # build the site, check every page
    python docs/scripts/check_layout.py --site site/     # check an already built site
    python docs/scripts/check_layout.py --width 1024
    python docs/scripts/check_layout.py --screenshots shots/   # and a PNG of each page

Each page is opened at ``--width`` px (1280 by default; ``--height`` 900) and measured in the
page with JavaScript. A page fails when

- an element of its content ends right of the content column (or of a box that clips it)
  without a box that scrolls sideways around it: it is *cut off*; the page as a whole must not
  scroll sideways either;
- an element of the content or of the sidebars is narrower than what it holds
  (``scrollWidth > clientWidth``): a code block, a table or a picture scrolled or clipped out
  of sight, a column of a table hidden behind a scroll bar;
- a word or identifier is broken across two lines (``grad_outpu`` / ``ts``);
- text lies under another element: the content is looked at a screen at a time below the
  header, each sidebar scrolled from top to end (a sticky title over a list, a copy button
  over a line of code);
- a picture is taller than the screen, or an SVG picture draws its smallest text less than
  ``MIN_TEXT_PX`` (11 px) high at the size it is shown.

Prints one line per page (with each picture's scale: shown width / natural width) and exits 1
when a page fails. Needs Chromium (Debian: ``apt-get install -y chromium``). The pages are
served from a local HTTP server and measured in one browser run: a harness page loads each
into an iframe of the checked size and writes its findings into the DOM, which
``--dump-dom`` prints.
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
import urllib.parse
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-extensions", "--no-first-run", "--disable-dev-shm-usage")
HARNESS = "_layout_harness.html"
MIN_TEXT_PX = 11

MEASURE_JS = r"""
function describe(el) {
  let text = el.tagName.toLowerCase();
  if (el.id) text += "#" + el.id;
  if (el.className && typeof el.className === "string") text += "." + el.className.trim().split(/\s+/).join(".");
  const words = (el.textContent || "").trim().replace(/\s+/g, " ").slice(0, 50);
  return words ? `${text} "${words}"` : text;
}
function textNodes(doc, scope) {
  const walker = doc.createTreeWalker(scope, NodeFilter.SHOW_TEXT, {
    acceptNode: node => /\S/.test(node.data) ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT});
  const nodes = [];
  for (let node; (node = walker.nextNode());) nodes.push(node);
  return nodes;
}
// Elements that hold more than they show: content wider than the box (scrolled or clipped).
function hiddenContent(win, scopes) {
  const found = [];
  for (const scope of scopes)
    for (const el of [scope, ...scope.querySelectorAll("*")]) {
      const overflow = win.getComputedStyle(el).overflowX;
      if (overflow !== "visible" && el.clientWidth && el.scrollWidth > el.clientWidth + 1)
        found.push(`${describe(el)} shows ${el.clientWidth}px of its ${el.scrollWidth}px ` +
                   `(${overflow === "hidden" || overflow === "clip" ? "clipped" : "behind a scroll bar"})`);
    }
  return found;
}
// Words and identifiers set on two lines: a range over the word has rects on two lines. In
// code a word is everything between spaces (`-fno-trapping-math`, `[--backend`); in prose a
// hyphen may end a line.
function brokenWords(doc, scope) {
  const found = [], range = doc.createRange();
  for (const node of textNodes(doc, scope)) {
    range.selectNodeContents(node);
    if (range.getClientRects().length < 2) continue;      // on one line: nothing to break
    const words = node.parentElement.closest("code") ? /\S{2,}/g : /[\w.%@]{2,}/g;
    for (const word of node.data.matchAll(words)) {
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
      if (tops.size > 1) found.push(`"${word[0]}" is broken across lines in ${describe(node.parentElement)}`);
    }
  }
  return found;
}
// Text that another element lies over (a sticky title over a list, a copy button over a line
// of code...). The content is checked a screen at a time, below the page's header; a sidebar
// that scrolls is checked scrolled to its top, a third and two thirds down, and to its end
// (what covers its lines may show only once it is scrolled).
function coveredText(doc, content, sidebars) {
  const win = doc.defaultView, found = new Set(), root = doc.documentElement;
  const header = doc.querySelector(".md-header");
  const top = header ? Math.max(0, header.getBoundingClientRect().bottom) : 0;
  const spans = textNodes(doc, content).map(node => {
    const range = doc.createRange();
    range.selectNodeContents(node);
    const box = range.getBoundingClientRect();
    return {node, top: box.top + win.scrollY, bottom: box.bottom + win.scrollY};
  });
  for (let y = 0; ; y += Math.max(100, win.innerHeight - top - 50)) {
    win.scrollTo(0, y);
    const shown = spans.filter(s => s.bottom > win.scrollY + top && s.top < win.scrollY + win.innerHeight);
    for (const text of coveredNow(doc, shown.map(s => s.node), top)) found.add(text);
    if (y + win.innerHeight >= root.scrollHeight) break;
  }
  win.scrollTo(0, 0);
  for (const sidebar of sidebars) {
    const nodes = textNodes(doc, sidebar);
    for (const text of coveredNow(doc, nodes, top)) found.add(text);
    for (const box of [sidebar, ...sidebar.querySelectorAll("*")]) {
      const overflow = win.getComputedStyle(box).overflowY;
      const end = box.scrollHeight - box.clientHeight;
      if ((overflow !== "auto" && overflow !== "scroll") || end < 1) continue;
      const start = box.scrollTop;
      for (const position of [0, end / 3, 2 * end / 3, end]) {
        box.scrollTop = position;
        for (const text of coveredNow(doc, nodes, top)) found.add(text);
      }
      box.scrollTop = start;
    }
  }
  return [...found];
}
// Which of the text nodes have a line, on screen below `top` and not scrolled out of a box,
// that another element lies over (tested at the middle of each side of each line).
function coveredNow(doc, nodes, top) {
  const win = doc.defaultView, found = [], range = doc.createRange(), clips = new Map();
  const clipsOf = el => {    // the boxes that clip el (overflow other than visible)
    if (!clips.has(el)) {
      const boxes = [];
      for (let a = el.parentElement; a && a !== doc.body; a = a.parentElement) {
        const style = win.getComputedStyle(a);
        if (style.overflowX !== "visible" || style.overflowY !== "visible")
          boxes.push(a.getBoundingClientRect());
      }
      clips.set(el, boxes);
    }
    return clips.get(el);
  };
  for (const node of nodes) {
    const el = node.parentElement;
    if (win.getComputedStyle(el).visibility !== "visible") continue;
    range.selectNodeContents(node);
    for (const r of range.getClientRects()) {
      if (r.width < 4 || r.height < 4 || r.top < top || r.bottom > win.innerHeight ||
          r.left < 0 || r.right > win.innerWidth ||
          clipsOf(el).some(c => r.top < c.top || r.bottom > c.bottom || r.left < c.left || r.right > c.right))
        continue;
      const midX = (r.left + r.right) / 2, midY = (r.top + r.bottom) / 2;
      const hit = [[midX, r.top + 2], [midX, r.bottom - 2], [r.left + 2, midY], [r.right - 2, midY]]
        .map(([x, y]) => [x, y, doc.elementFromPoint(x, y)])
        .find(([, , hit]) => hit && hit !== el && !el.contains(hit) && !hit.contains(el));
      if (hit) {
        found.push(`${describe(el)} lies under ${describe(hit[2])}`);
        break;
      }
    }
  }
  return found;
}
function measure(doc) {
  const win = doc.defaultView, root = doc.documentElement;
  const cut = [];
  if (root.scrollWidth > root.clientWidth + 1)
    cut.push(`the page scrolls sideways (${root.scrollWidth}px wide in ${root.clientWidth}px)`);
  const content = doc.querySelector(".md-content__inner") || doc.querySelector("[role=main]") || doc.body;
  const sidebars = [...doc.querySelectorAll(".md-sidebar")].filter(s => s.getBoundingClientRect().width);
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
  const images = [...content.querySelectorAll("img")].map(img => {
    const box = img.getBoundingClientRect();
    return {src: img.getAttribute("src"), url: img.currentSrc, natural: img.naturalWidth,
            shown: Math.round(box.width), shown_height: Math.round(box.height)};
  });
  return {cut, hidden: hiddenContent(win, [content, ...sidebars]),
          broken: brokenWords(doc, content), covered: coveredText(doc, content, sidebars),
          images, column: Math.round(column.width), height: root.scrollHeight,
          screen: [win.innerWidth, win.innerHeight]};
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
    await new Promise(resolve => setTimeout(resolve, 1000));   // the theme sizes and scrolls its sidebars
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
    """``{page: findings}`` for every page of ``site``, measured at ``width`` x ``height`` px:
    ``cut``, ``hidden``, ``broken`` and ``covered`` (lists of what is wrong, see the module
    docstring), ``images`` (each picture's ``src``, ``url``, ``natural`` width and ``shown``
    width and ``shown_height``), ``column`` (its width), ``height`` (the page's) and
    ``screen``. :func:`problems` turns one page's findings into the list of its problems."""
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
                [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}",
                 f"--window-size={width + 40},{height + 40}", "--virtual-time-budget=120000",
                 "--dump-dom", f"{base}/{HARNESS}"],
                capture_output=True, text=True, timeout=300)
    finally:
        harness.unlink()
    found = re.search(r'<pre id="layout-report">(.*?)</pre>', result.stdout, re.DOTALL)
    if found is None:
        raise RuntimeError(f"the browser wrote no report (exit {result.returncode}): "
                           f"{result.stderr[-2000:]}")
    return json.loads(html.unescape(found.group(1)))


def problems(site: Path, found: dict) -> list[str]:
    """What is wrong with one page, from its :func:`measure_site` findings: what the page
    measured, and the pictures that are taller than the screen or whose text is drawn too
    small to read."""
    listed = found["cut"] + found["hidden"] + found["broken"] + found["covered"]
    for image in found["images"]:
        name = Path(image["src"]).name
        if image["shown_height"] > found["screen"][1]:
            listed.append(f"{name} is shown {image['shown_height']}px tall, taller than the "
                          f"{found['screen'][1]}px screen")
        text = picture_text_px(site, image)
        if text is not None and text < MIN_TEXT_PX:
            listed.append(f"{name} draws its smallest text {text:.1f}px high (shown "
                          f"{image['shown']}px wide); {MIN_TEXT_PX}px at least")
    return listed


def picture_text_px(site: Path, image: dict) -> float | None:
    """How high the smallest text of an SVG picture is drawn at the width it is shown (None
    for other pictures and for an SVG without text): its smallest ``font-size`` in the
    units of its ``viewBox`` (or of its ``width``), scaled to the shown width."""
    path = site / urllib.parse.urlparse(image["url"]).path.lstrip("/")
    if path.suffix != ".svg" or not path.is_file():
        return None
    svg = path.read_text(encoding="utf-8")
    sizes = [float(size) for size in re.findall(r'font-size[=:]\s*"?([\d.]+)', svg)]
    root = re.search(r"<svg\b[^>]*>", svg, re.DOTALL)
    view = root and (re.search(r'viewBox="\s*[-\d.]+[\s,]+[-\d.]+[\s,]+([\d.]+)', root[0])
                     or re.search(r'\bwidth="([\d.]+)', root[0]))
    if not sizes or not view:
        return None
    return min(sizes) * image["shown"] / float(view[1])


def screenshots(site: Path, report: dict, target: Path, width: int = 1280, height: int = 900,
                browser=None) -> list[Path]:
    """A PNG of each page of ``report``: ``<page>.png`` the first screen at ``width`` x
    ``height`` px (with its scroll bar, as :func:`measure_site` sees it), ``<page>-full.png``
    the whole page at the same width (as tall as the page: no scroll bar). Returns the files."""
    browser = browser or find_browser()
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with serve(site) as base, tempfile.TemporaryDirectory() as profile:
        for page, found in report.items():
            name = page.strip("/").removesuffix("index.html").strip("/").replace("/", "-")
            for suffix, tall in (("", height), ("-full", max(height, found["height"]))):
                png = target / f"{name or 'index'}{suffix}.png"
                subprocess.run([browser, *BROWSER_FLAGS, f"--user-data-dir={profile}",
                                f"--window-size={width},{tall}",
                                f"--screenshot={png}", base + page],
                               capture_output=True, timeout=120, check=True)
                written.append(png)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, help="a built site (default: build one)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--screenshots", type=Path, metavar="DIR",
                        help="also write a PNG of each page (first screen and whole page)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        site = args.site
        if site is None:
            site = Path(scratch) / "site"
            build_site(site)
        report = measure_site(site, args.width, args.height)
        failed = False
        for page, found in report.items():
            listed = problems(site, found)
            pictures = ", ".join(describe_picture(site, image) for image in found["images"])
            print(f"{page:32} column {found['column']}px  "
                  + (f"{len(listed)} problem(s)" if listed else "ok")
                  + (f"; pictures: {pictures}" if pictures else ""))
            for problem in listed:
                print(f"    {problem}")
            failed = failed or bool(listed)
        if args.screenshots:
            written = screenshots(site, report, args.screenshots, args.width, args.height)
            print(f"wrote {len(written)} screenshots to {args.screenshots}")
    return 1 if failed else 0


def describe_picture(site: Path, image: dict) -> str:
    """``name at scale (text N px)`` for the line of a page."""
    text = picture_text_px(site, image)
    scale = f" at {image['shown'] / image['natural']:.0%}" if image["natural"] else ""
    return (Path(image["src"]).name + scale
            + (f" (text {text:.1f}px)" if text is not None else ""))


if __name__ == "__main__":
    sys.exit(main())
