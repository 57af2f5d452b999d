"""Check the built site (stage 4 of the test command).

- every file in _toc.yml has a page;
- no tooling is visible: no nbdev `#|` directive, no nbval marker, in any page's text;
- math is served from the site itself (offline MathJax), never from a CDN;
- every chapter page has an "Open in Colab" link to its notebook;
- where Debian's chromium is installed, a chapter page is rendered headless and must contain
  typeset math elements.
"""
import html
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

TOOLING = [re.compile(r"#\s*\|"), re.compile(r"NBVAL_"), re.compile(r"nbval-(skip|ignore|check|raises)")]


def toc_files(toc: Path) -> list[str]:
    data = yaml.safe_load(toc.read_text())
    files = [data["root"]]
    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(node["file"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(data.get("parts", data.get("chapters", [])))
    return files


def visible_text(page: str) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def main(site: Path) -> int:
    errors = []
    files = toc_files(Path("_toc.yml"))
    for f in files:
        if not (site / f"{f}.html").exists():
            errors.append(f"{f}: no page {f}.html in the site")
    for page in sorted(site.rglob("*.html")):
        if "_static" in page.parts:
            continue
        text = page.read_text(encoding="utf-8")
        for pat in TOOLING:
            for m in pat.finditer(visible_text(text)):
                errors.append(f"{page.relative_to(site)}: tooling visible: {m.group(0)!r}")
        for src in re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', text, flags=re.I):
            if src.startswith(("http:", "https:", "//")):
                errors.append(f"{page.relative_to(site)}: MathJax loaded from {src}")
            elif not (page.parent / src.split("?")[0]).exists():
                errors.append(f"{page.relative_to(site)}: MathJax script {src} missing from the site")
    chapters = [f for f in files if f.startswith("nbs/")]
    for f in chapters:
        page = site / f"{f}.html"
        if page.exists() and not re.search(rf'colab\.research\.google\.com/github/[^"]*/{re.escape(f)}\.ipynb',
                                           page.read_text(encoding="utf-8")):
            errors.append(f"{f}.html: no Open-in-Colab link to {f}.ipynb")
    chromium = shutil.which("chromium")
    if chromium and chapters:
        page = (site / f"{chapters[0]}.html").resolve()
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                capture_output=True, text=True, timeout=120).stdout
        n = dom.count("<mjx-container")
        print(f"chromium: {page.name} has {n} typeset math elements")
        if n == 0:
            errors.append(f"{page.name}: chromium rendered no math (no <mjx-container>)")
    else:
        print("chromium not installed: skipped the headless render")
    for e in errors:
        print("ERROR", e, file=sys.stderr)
    print(f"site check: {len(files)} toc entries, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
