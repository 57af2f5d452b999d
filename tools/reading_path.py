"""How much a reader of Part I reads: words of prose and lines of code, page by page.

    python tools/reading_path.py            # print the table, write bench/results/reading_path.json
    python tools/reading_path.py --write    # also write the block in README.md and book/intro.md
    python tools/reading_path.py --check    # exit 1 where a block differs from the current pages

The pages are Part I of _toc.yml (the part whose caption starts with "Part I:"), in order,
with nbs/00_start.ipynb first where it exists and the contents do not list it.

What is counted, as the book shows a page:
- prose: the words of markdown cells. Fenced code blocks, display math ($$...$$, \\[...\\]),
  HTML comments and tags, and link targets are left out; inline math and inline code count
  one word each; a word is a run of characters without spaces that holds a letter or digit
  (table cells count, table rules do not). The note at a page's top on what running it costs
  (the cell tagged `running-cost`, written by tools/nbclean.py) is not the lesson: left out.
- code: the non-blank lines of code cells the book shows. Cells it removes are left out
  (an nbdev `#| hide` directive, a `remove-cell` or `remove-input` tag), and so are the
  `#|` directive lines themselves, which the book strips. Cells tagged `hide-input` count:
  they are folded, one click away. Outputs are not counted.

Reading time uses two rates, both assumptions stated here:
- 200 words a minute of prose. Brysbaert (2019, "How many words do we read per minute?",
  Journal of Memory and Language 109) puts silent reading of English non-fiction at about
  238 words a minute; technical prose with equations is read more slowly, so we take 200.
- 20 lines of code a minute to follow a tutorial's code. The only published pace we know
  is a reviewer's hunting for defects: the SmartBear/Cisco code-review study (Cohen, "Best
  Kept Secrets of Peer Code Review", 2006) recommends fewer than about 500 lines an hour,
  about 8 a minute. Following code that the prose has just explained goes faster; we
  calibrate on the Annotated Transformer of Harvard NLP, whose page of about 3,300 words and
  1,100 lines of code is commonly read in one to one and a half hours: after its prose at
  200 words a minute, that leaves 15 to 26 lines a minute, and we take 20. The output also
  gives the time at the reviewer's 8 lines a minute, as an upper bound. Both rates are
  assumptions, not measurements of this book's readers.
"""
import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench/results/reading_path.json"
DOCS = [ROOT / "README.md", ROOT / "book/intro.md"]
BEGIN, END = "<!-- reading-path: begin -->", "<!-- reading-path: end -->"
WORDS_PER_MINUTE = 200
CODE_LINES_PER_MINUTE = 20
REVIEW_LINES_PER_MINUTE = 8    # the upper bound: a defect-hunting review's pace
START = "nbs/00_start"


def part_one() -> list[str]:
    "Part I's notebooks, as paths relative to the root without the suffix."
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    part = next(p for p in toc["parts"] if p["caption"].startswith("Part I:"))
    files = [c["file"] for c in part["chapters"] if c["file"].startswith("nbs/")]
    if (ROOT / f"{START}.ipynb").exists() and START not in files:
        files.insert(0, START)
    return [f for f in files if (ROOT / f"{f}.ipynb").exists()]


def prose_words(markdown: str) -> int:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)           # fenced code
    text = re.sub(r"\$\$.*?\$\$|\\\[.*?\\\]", " ", text, flags=re.S)  # display math
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"`[^`]+`", " CODE ", text)                        # inline code: a word
    text = re.sub(r"\$[^$\n]+\$", " MATH ", text)                    # inline math: a word
    text = re.sub(r"\]\([^)]*\)", "]", text)                          # link targets
    text = re.sub(r"<[^>]+>", " ", text)                              # HTML tags
    return sum(1 for w in text.split() if re.search(r"\w", w))


def cell_tags(cell: dict) -> set:
    return set(cell.get("metadata", {}).get("tags", []))


def shown_code_lines(cell: dict) -> tuple[int, bool] | None:
    "Non-blank lines the book shows of a code cell and whether it is folded; None if removed."
    tags = cell_tags(cell)
    if tags & {"remove-cell", "remove-input"}:
        return None
    lines = "".join(cell["source"]).splitlines()
    directives = [l[2:].split() for l in lines if l.startswith("#|")]
    if any(d and d[0] == "hide" for d in directives):
        return None
    return (sum(1 for l in lines if l.strip() and not l.startswith("#|")),
            "hide-input" in tags)


def page(path: Path) -> dict:
    nb = json.loads(path.read_text(encoding="utf-8"))
    words = code = folded = 0
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and "running-cost" not in cell_tags(cell):
            words += prose_words("".join(cell["source"]))
        elif cell["cell_type"] == "code":
            shown = shown_code_lines(cell)
            if shown:
                code += shown[0]
                folded += shown[0] if shown[1] else 0
    return {"words": words, "code_lines": code, "folded_code_lines": folded,
            "minutes": round(words / WORDS_PER_MINUTE + code / CODE_LINES_PER_MINUTE, 1)}


def measure() -> dict:
    pages = {Path(f).name: page(ROOT / f"{f}.ipynb") for f in part_one()}
    total = {k: sum(p[k] for p in pages.values())
             for k in ("words", "code_lines", "folded_code_lines")}
    total["minutes"] = round(total["words"] / WORDS_PER_MINUTE
                             + total["code_lines"] / CODE_LINES_PER_MINUTE, 1)
    total["minutes_at_review_pace"] = round(total["words"] / WORDS_PER_MINUTE
                                            + total["code_lines"] / REVIEW_LINES_PER_MINUTE, 1)
    return {"what": "Part I of _toc.yml; see tools/reading_path.py for what is counted",
            "rates": {"words_per_minute": WORDS_PER_MINUTE,
                      "code_lines_per_minute": CODE_LINES_PER_MINUTE,
                      "review_code_lines_per_minute": REVIEW_LINES_PER_MINUTE},
            "pages": pages, "total": total}


def table(m: dict) -> str:
    t, r = m["total"], m["rates"]
    lines = [f"Part I is {len(m['pages'])} pages: {t['words']:,} words of prose and "
             f"{t['code_lines']:,} lines of code, about {t['minutes'] / 60:.1f} hours of "
             f"reading at {r['words_per_minute']} words and {r['code_lines_per_minute']} "
             f"lines of code a minute ({t['minutes_at_review_pace'] / 60:.1f} hours if the "
             f"code is read at a reviewer's {r['review_code_lines_per_minute']} lines a "
             "minute; counted by `python tools/reading_path.py`; running the code is extra).",
             "",
             "| page | words | lines of code | minutes to read |", "|---|---:|---:|---:|"]
    for name, p in m["pages"].items():
        lines.append(f"| {name} | {p['words']:,} | {p['code_lines']:,} | {p['minutes']:.0f} |")
    lines.append(f"| Part I | {t['words']:,} | {t['code_lines']:,} | {t['minutes']:.0f} |")
    return "\n".join(lines)


def with_block(text: str, block: str) -> str:
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{rest.split(END, 1)[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help="write the blocks in the docs")
    ap.add_argument("--check", action="store_true", help="exit 1 where a block is stale")
    args = ap.parse_args()
    m = measure()
    block = table(m)
    print(block)
    if args.check:
        stale = [str(d.relative_to(ROOT)) for d in DOCS
                 if BEGIN in d.read_text(encoding="utf-8")
                 and with_block(d.read_text(encoding="utf-8"), block)
                 != d.read_text(encoding="utf-8")]
        if stale:
            sys.exit(f"stale reading-path block in {', '.join(stale)}: "
                     "run python tools/reading_path.py --write")
        return
    OUT.write_text(json.dumps(m, indent=1) + "\n")
    if args.write:
        for d in DOCS:
            text = d.read_text(encoding="utf-8")
            if BEGIN in text and END in text:
                d.write_text(with_block(text, block), encoding="utf-8")


if __name__ == "__main__":
    main()
