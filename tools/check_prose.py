"""Check the book's prose: every number it states is tied to what a page computed, and no
page narrates how the book was made.

A numeral in a markdown cell (or a markdown page of the book) passes if it is
- tied: written as ``18.8<!--tie:NAME-->``, where a code cell of the same page carries the
  cell tag ``tie:NAME`` and that cell's stored output contains the same number (thousands
  separators and the sign's form aside: ``1,200`` matches ``1200``, ``−2`` matches ``-2``);
- inside math (``$...$``, ``$$...$$``) or code (backticks, fenced blocks);
- part of a reference: a section, equation, table, figure, row, chapter, part, page or
  exercise number (``§3.2.1``, ``Table 3``, ``chapters 12–14``), a chapter number in a
  heading or in a link's text, a numbered list's marker;
- a year (1900-2099) or inside a citation (an author and year, an arXiv number);
- a bare 0 or 1 (mean 0, variance 1, "below 1": the identities of arithmetic, not results);
- covered by a phrase of ``tools/prose_allowlist.txt`` (facts of the paper and the data,
  each with its source).

Why a tag and a check, not a value written into the text after execution: a number in a
sentence carries a claim ("faster", "within", "most"), and a number rewritten by a tool can
leave the claim behind it wrong. The check makes drift impossible to miss; the author fixes
the sentence. The tie names the cell a reader can look at to see the number printed.

The same check fails on words that narrate the making of the book (HARNESS below), in
prose, in code comments (Colab shows every cell, hidden ones too) and in stored outputs.

    python tools/check_prose.py                 # every page of _toc.yml
    python tools/check_prose.py nbs/09_decoding.ipynb
    python tools/check_prose.py --list nbs/09_decoding.ipynb   # every numeral and its verdict
"""
import argparse
import json
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "tools/prose_allowlist.txt"
# pages whose prose is not yet tied, one path a line: checked only when named on the command
# line, and listed on every run until they leave this file (the list only shrinks)
PENDING = ROOT / "tools/prose_pending.txt"

TIE = re.compile(r"<!--\s*tie:([\w.-]+)\s*-->")
NUMERAL = re.compile(r"[-−+]?\d[\d,\u2009\u202f]*(?:\.\d+)?(?:e[-+]?\d+)?")
# letters that may follow a number without making it a name ("30k", "4×" is not a letter)
UNITS = {"k", "K", "M", "B", "G", "x", "ms", "s", "h", "min", "st", "nd", "rd", "th", "GB",
         "MB", "KB", "kB", "GiB", "MiB", "KiB", "TB", "px", "pt", "GHz", "MHz", "m", "µs",
         "us", "ns", "d", "bit", "bits", "B/s", "e"}
REF_WORDS = (r"§+|[Ss]ections?|[Ss]ecs?\.|[Tt]ables?|[Ff]igures?|[Ff]igs?\.|[Ee]qs?\.|"
             r"[Ee]quations?|[Cc]hapters?|[Pp]arts?|[Pp]ages?|[Rr]ows?|[Ee]xercises?|"
             r"[Aa]ppendix|[Ff]ootnotes?|[Cc]ells?|[Ss]teps? \d+ of [Aa]lgorithm|[Ll]ines?")
REF = re.compile(rf"(?:{REF_WORDS})\s*\(?[\dA-Za-z][\w.]*\)?"
                 r"(?:(?:\s*(?:,|–|-|—|and|or|to|&)\s*)\(?\d[\w.]*\)?)*")
YEAR = re.compile(r"(?<![\d.,])(?:19|20)\d\d(?![\d.,]\d)")
CITATION = re.compile(r"\([^()]*(?:et al\.|[A-Z][a-z]+ and [A-Z][a-z]+)[^()]*\)"
                      r"|\[[\w\s.,&;:-]*\d{4}[a-z]?\]|arXiv:\s?\d{4}\.\d{4,5}(?:v\d+)?")
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$|\\\(.*?\\\)|\\\[.*?\\\]", re.S)
CODE = re.compile(r"```.*?```|~~~.*?~~~|``.*?``|`[^`\n]*`", re.S)
COMMENT = re.compile(r"<!--(?!\s*tie:).*?-->", re.S)
LINK_TARGET = re.compile(r"\]\([^)]*\)|<https?://[^>]*>|https?://\S+")
LOCAL_LINK_TEXT = re.compile(r"\[([^\]]*)\]\((?!https?:)[^)]*\)")
HEADING_NUMBER = re.compile(r"^(#+\s+)([\dA-Z]+[a-z]?′?\.)", re.M)
LIST_MARKER = re.compile(r"^(\s*)\d+[.)](?=\s)", re.M)
MYST_DIRECTIVE = re.compile(r"^(```|:::)\{[^}]*\}.*$", re.M)
ROLE = re.compile(r"\{\w+\}`[^`]*`")
GENERATED = re.compile(r"<!-- ([\w-]+): begin -->.*?<!-- \1: end -->", re.S)

# Words that narrate how the book was made: (pattern, what it is)
HARNESS = [
    # "test" itself is a statistical word (a paired test, the test set); these are not
    (r"\b(?:unit|smoke|regression|integration)\s+tests?\b|\btest\s+(?:suite|runs?|"
     r"command|stage|harness)\b|\b(?:the book's|our|the)\s+tests\b(?!\s+(?:of|per|at|on)\b)"
     r"|\btests/", "the tests"),
    (r"\bCI\b", "CI"), (r"\bnbval\b", "nbval"), (r"\bpytest\b", "pytest"),
    (r"\bquick[ -]mode\b", "quick mode"), (r"\bAT_QUICK\b", "the quick switch"),
    (r"\bsessions?\b", "a session"), (r"\blent\b", "a lent machine"),
    (r"\bborrowed\b", "a borrowed machine"), (r"\bthis machine\b", "this machine"),
    (r"\bwhile this (?:chapter|page|book) was written\b", "the writing of the book"),
    (r"\bthis book was written on\b", "the writing of the book"),
    (r"\bworktrees?\b", "git worktrees"), (r"\bpaused\b", "paused processes"),
    (r"\bbuild machine\b", "the build machine"), (r"\btest command\b", "the test command"),
    (r"\bmake test\b", "make test"), (r"\bGitHub Actions\b", "GitHub Actions"),
]
# a test of a statistic, a test set, "tested": allowed
STAT_TEST = re.compile(r"(?:\bt|rank|permutation|sign|signed-rank|significance|statistical|"
                       r"paired|one-sided|two-sided|Wilcoxon|Holm|exact|likelihood-ratio|"
                       r"Friedman|Mann[–-]Whitney|bootstrap|McNemar|binomial|Welch|Student's"
                       r"|sign-flip|randomi[sz]ation|chi-squared|χ²)[\s-]+tests?\b", re.I)


def normalise(num: str) -> str:
    s = re.sub(r"[,\u2009\u202f]", "", num).replace("−", "-").lstrip("+")
    if "e" in s:
        mant, exp = s.split("e")
        s = f"{mant}e{int(exp)}"
    return s


def numerals(text: str):
    "(start, end, text) of each numeral that is a number, not part of a name."
    for m in NUMERAL.finditer(text):
        a, b = m.span()
        before = text[a - 1] if a else " "
        if before.isalnum() or before in "_./\\" or (before in "-−" and a > 1
                                                      and text[a - 2].isalnum()):
            continue                                     # bf16, AVX-512, v1.2, x86_64
        if text[a] in "-−+" and a and text[a - 1].isalnum():
            continue
        tail = re.match(r"[A-Za-zµ/]+", text[b:])
        if tail and tail.group(0) not in UNITS and not tail.group(0).startswith("e-"):
            continue                                     # 3D, 2nd-order names, P100
        if text[b:b + 1] in ("_",) or (text[b:b + 1] == "." and text[b + 1:b + 2].isalpha()):
            continue
        num = text[a:b].rstrip(",")
        if num in ("0", "1"):
            continue                                     # mean 0, variance 1: arithmetic
        yield a, b, num


def blank(text: str, pattern: re.Pattern, group: int = 0) -> str:
    "Replace each match (or its group) with spaces, keeping offsets."
    def sub(m):
        a, b = m.span(group)
        s = m.group(0)
        return s[:a - m.start()] + " " * (b - a) + s[b - m.start():]
    return pattern.sub(sub, text)


def output_numbers(cell) -> set[str]:
    texts = []
    for o in cell.get("outputs", []):
        if "text" in o:
            texts.append("".join(o["text"]))
        for mime, v in o.get("data", {}).items():
            if mime.startswith("text/"):
                texts.append("".join(v))
    return {normalise(m.group(0).rstrip(",")) for t in texts for m in NUMERAL.finditer(t)}


def allow_phrases() -> list[str]:
    out = []
    for line in ALLOWLIST.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            phrase, _, source = line.partition(" | ")
            if not source.strip():
                raise SystemExit(f"{ALLOWLIST}: entry without a source: {line}")
            out.append(phrase.strip())
    return out


def check_text(text: str, ties: dict, phrases: list[str], where: str):
    """Verdicts on the numerals of one markdown text: list of (numeral, verdict, ok)."""
    text = GENERATED.sub(lambda m: " " * len(m.group(0)), text)
    results = []
    # ties first, on the raw text: the numeral just before each marker
    tied = set()
    for m in TIE.finditer(text):
        name = m.group(1)
        before = text[:m.start()]
        num = re.search(r"[-−+]?\d[\d,\u2009\u202f]*(?:\.\d+)?(?:e[-+]?\d+)?\D{0,2}$", before)
        if not num:
            results.append((f"<!--tie:{name}-->", "a tie with no number before it", False))
            continue
        value = normalise(re.match(NUMERAL, num.group(0)).group(0).rstrip(","))
        start = num.start()
        tied.add(start)
        if name not in ties:
            results.append((value, f"tied to '{name}', but no code cell is tagged tie:{name}",
                            False))
        elif value not in ties[name]:
            shown = ", ".join(sorted(ties[name], key=lambda s: (len(s), s))[:12])
            results.append((value, f"not in the output of tie:{name} (it prints {shown})",
                            False))
        else:
            results.append((value, f"tied to {name}", True))
    clean = text
    for pat in (MYST_DIRECTIVE, MATH, CODE, COMMENT, TIE, ROLE, CITATION):
        clean = blank(clean, pat)
    clean = LOCAL_LINK_TEXT.sub(lambda m: " " * len(m.group(0)), clean)
    clean = blank(clean, LINK_TARGET)
    clean = HEADING_NUMBER.sub(lambda m: m.group(1) + " " * len(m.group(2)), clean)
    clean = LIST_MARKER.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))),
                            clean)
    for pat in (REF, YEAR):
        clean = blank(clean, pat)
    for phrase in phrases:
        clean = clean.replace(phrase, " " * len(phrase))
    for a, b, num in numerals(clean):
        if a in tied or any(abs(a - t) <= 1 for t in tied):
            continue
        line = clean[:a].count("\n") + 1
        ctx = text[max(0, a - 40):b + 30].replace("\n", " ")
        results.append((num, f"bare number (line {line}): ...{ctx}...", False))
    return results


def harness(text: str, where: str) -> list[str]:
    text = STAT_TEST.sub(" ", text)
    found = []
    for pat, what in HARNESS:
        for m in re.finditer(pat, text, re.I if what not in ("CI",) else 0):
            ctx = text[max(0, m.start() - 40):m.end() + 30].replace("\n", " ")
            found.append(f"{where}: narrates {what}: ...{ctx}...")
    return found


def code_comments(source: str) -> str:
    "The comments of a code cell (not nbdev's #| directives)."
    out = []
    for line in source.splitlines():
        if line.lstrip().startswith("#|"):
            continue
        m = re.search(r"(?<![\"'])#(?!\|)(.*)$", line)
        if m:
            out.append(m.group(1))
    return "\n".join(out)


def check_page(path: Path, phrases: list[str], listing: bool = False) -> list[str]:
    problems = []
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        ties = {}
        for c in nb["cells"]:
            for tag in c.get("metadata", {}).get("tags", []):
                if tag.startswith("tie:"):
                    if tag[4:] in ties:
                        problems.append(f"{path}: two cells tagged {tag}")
                    ties[tag[4:]] = output_numbers(c)
        cells = nb["cells"]
    else:
        ties, cells = {}, [{"cell_type": "markdown", "source": path.read_text(encoding="utf-8"),
                            "id": "page"}]
    for i, c in enumerate(cells):
        src = "".join(c["source"])
        where = f"{path}[{i}]"
        if c["cell_type"] == "markdown":
            for num, verdict, ok in check_text(src, ties, phrases, where):
                if listing:
                    print(f"{where} {'ok ' if ok else 'BAD'} {num}: {verdict}")
                if not ok:
                    problems.append(f"{where}: {num}: {verdict}")
            problems += harness(blank(blank(src, CODE), LINK_TARGET), where)
        elif c["cell_type"] == "code":
            problems += harness(code_comments(src), f"{where} (code comment)")
            for o in c.get("outputs", []):
                text = "".join(o.get("text", "")) + "".join(
                    "".join(v) for k, v in o.get("data", {}).items() if k == "text/plain")
                problems += [p for p in harness(text, f"{where} (output)")
                             if "the tests" not in p]
    return problems


def pending() -> set[Path]:
    if not PENDING.exists():
        return set()
    return {ROOT / l.strip() for l in PENDING.read_text().splitlines()
            if l.strip() and not l.startswith("#")}


def pages(include_pending: bool = False) -> list[Path]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [ch["file"] for ch in part["chapters"]]
    out = []
    for f in files:
        for ext in (".ipynb", ".md"):
            if (ROOT / (f + ext)).exists():
                out.append(ROOT / (f + ext))
    return out if include_pending else [p for p in out if p not in pending()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*", type=Path)
    ap.add_argument("--list", action="store_true", help="print every numeral's verdict")
    args = ap.parse_args(argv)
    phrases = allow_phrases()
    problems = []
    todo = args.paths or pages()
    for p in todo:
        problems += check_page(p, phrases, args.list)
    for p in problems:
        print(p)
    print(f"check_prose: {len(problems)} problem(s) in {len(todo)} page(s)", file=sys.stderr)
    if not args.paths and pending():
        names = ", ".join(sorted(p.relative_to(ROOT).as_posix() for p in pending()))
        print(f"check_prose: not yet tied, skipped ({PENDING.name}): {names}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
