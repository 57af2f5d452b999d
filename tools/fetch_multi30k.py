"""Write the Multi30k English-German text files that the tests read.

    python tools/fetch_multi30k.py [TARGET] [--source official|hub] [--hub PATH_OR_ID]

By default (`--source official`) the files come from the official Multi30k repository at a
pinned commit (`OFFICIAL`: the gzipped raw files of Task 1), each checked against the SHA-256
of the text that ../shared/data/multi30k/README.md lists, so a CI runner tests exactly the bytes
this machine does and the notebooks' stored outputs match. If that download fails, or with
`--source hub`, the script falls back to the hub copy, as follows.

The tests (and `make test`) read `../shared/data/multi30k/{train,val,test_2016_flickr}.{en,de}`
beside the repository and never go online. A machine without that folder (a CI runner) runs this
script first: it loads the corpus with the package's own loader,
`annotated_transformer.data.load_multi30k()` with no local folder, which reads the hub copy
`bentrevett/multi30k`, and writes each split as two UTF-8 files, one sentence per line. The lines
are those the loader gives (normalised by `normalize_line`); the hub copy may differ from the
official text files in a few lines.

If all six files are already in TARGET it does nothing, not even import the package. Files are
written under temporary names and renamed at the end, so an interrupted run leaves no partial set.

`--hub` (or the environment variable `AT_MULTI30K_HUB`, which the data module honours) replaces
the hub id by another id or by a local folder holding `train.jsonl`, `val.jsonl` and `test.jsonl`
(one JSON object with "en" and "de" per line, the hub copy's layout): a stand-in for tests.
"""
import argparse
import gzip
import hashlib
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TARGET = REPO.parent / "shared" / "data" / "multi30k"
LANGS = ("en", "de")
# the loader's split name -> file stem (as `annotated_transformer.data.MULTI30K_SPLITS`)
STEMS = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
HUB_ENV = "AT_MULTI30K_HUB"
OFFICIAL = ("https://raw.githubusercontent.com/multi30k/dataset/"
            "a3d2e0d26b56f3846f66a952536ffed4e401d05a/data/task1/raw")
SHA256 = {  # of the gunzipped text, as listed in ../shared/data/multi30k/README.md
    "train.en": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "train.de": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "val.en": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "val.de": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "test_2016_flickr.en": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "test_2016_flickr.de": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
}


def wanted_files(target: Path) -> list[Path]:
    return [target / f"{stem}.{lang}" for stem in STEMS.values() for lang in LANGS]


def present(target: Path) -> bool:
    "All six files exist and none is empty."
    return all(f.is_file() and f.stat().st_size > 0 for f in wanted_files(target))


def write_splits(ds, target: Path) -> dict[str, int]:
    """Write each split of `ds` (splits train/validation/test, columns en, de) as text files.

    Returns the number of lines per file stem. All files go to temporary names first and are
    renamed only once every split has been written.
    """
    target.mkdir(parents=True, exist_ok=True)
    written, counts = [], {}
    try:
        for split, stem in STEMS.items():
            columns = {lang: ds[split][lang] for lang in LANGS}
            lengths = {len(rows) for rows in columns.values()}
            if len(lengths) != 1:
                raise ValueError(f"split {split!r}: the languages have different line counts")
            for lang, rows in columns.items():
                if any("\n" in s or "\r" in s for s in rows):
                    raise ValueError(f"split {split!r} ({lang}): a sentence contains a newline")
                tmp = target / f".{stem}.{lang}.partial"
                with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                    f.writelines(s + "\n" for s in rows)
                written.append((tmp, target / f"{stem}.{lang}"))
            counts[stem] = lengths.pop()
        for tmp, final in written:
            os.replace(tmp, final)
    finally:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
    return counts


def fetch_official(target: Path, base: str = OFFICIAL) -> None:
    """Download `<base>/<name>.gz` for the six files, check each text's SHA-256, and only
    then move all of them into `target`; raises OSError (nothing written) on any failure."""
    target.mkdir(parents=True, exist_ok=True)
    parts = []
    try:
        for f in wanted_files(target):
            url = f"{base}/{f.name}.gz"
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    text = gzip.decompress(response.read())
            except (urllib.error.URLError, OSError, EOFError) as e:
                raise OSError(f"{url}: {e}") from None
            if hashlib.sha256(text).hexdigest() != SHA256[f.name]:
                raise OSError(f"{url}: the text's SHA-256 is not the one listed")
            part = target / f".{f.name}.partial"
            part.write_bytes(text)
            parts.append((part, f))
        for part, f in parts:
            os.replace(part, f)
    finally:
        for part, _ in parts:
            part.unlink(missing_ok=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("target", nargs="?", type=Path, default=DEFAULT_TARGET,
                   help=f"folder for the text files (default: {DEFAULT_TARGET})")
    p.add_argument("--source", choices=["official", "hub"], default="official",
                   help="the official repository's files (default; the hub if that fails) "
                        "or the hub copy")
    p.add_argument("--official-url", default=OFFICIAL, help=argparse.SUPPRESS)  # tests
    p.add_argument("--hub", help=f"hub id or local folder to read instead of the hub copy "
                                 f"(sets ${HUB_ENV})")
    args = p.parse_args(argv)
    target = args.target.expanduser().resolve()
    if present(target):
        print(f"Multi30k: the text files are already in {target}; nothing to do")
        return 0
    if args.source == "official":
        try:
            fetch_official(target, args.official_url)
            print(f"Multi30k: wrote the official en/de files to {target} (hashes checked)")
            return 0
        except OSError as e:
            print(f"Multi30k: official files unavailable ({e}); trying the hub copy")
    if args.hub:
        os.environ[HUB_ENV] = args.hub
    # The loader reads a local folder when $MULTI30K_DIR is set; we want the hub copy.
    os.environ.pop("MULTI30K_DIR", None)
    from annotated_transformer.data import MULTI30K_HUB, load_multi30k
    source = f"${HUB_ENV}={os.environ[HUB_ENV]}" if os.environ.get(HUB_ENV) else MULTI30K_HUB
    print(f"Multi30k: loading {'/'.join(LANGS)} from {source}")
    ds = load_multi30k(None, langs=LANGS)
    counts = write_splits(ds, target)
    summary = ", ".join(f"{stem} {n}" for stem, n in counts.items())
    print(f"Multi30k: wrote {len(counts) * len(LANGS)} files to {target} (lines: {summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
