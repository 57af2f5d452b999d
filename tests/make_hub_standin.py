"""Build a stand-in for the hub copy of Multi30k from the local text files.

    python tests/make_hub_standin.py SRC OUT

SRC holds the Multi30k task-1 text files (train.en, val.de, test_2016_flickr.en, ...);
OUT gets the hub's layout, as in `bentrevett/multi30k`: train.jsonl, val.jsonl and
test.jsonl, one JSON object per line with keys "en" and "de".
`datasets.load_dataset(OUT)` reads it offline through the same code path as the hub id,
so pointing `AT_MULTI30K_HUB` at OUT runs the hub branch of `load_multi30k` without a
network. Lines are copied as they are (the loader normalises them).
"""
import json
import sys
from pathlib import Path

# file in the hub's layout -> stem of the text files
HUB_FILES = {"train": "train", "val": "val", "test": "test_2016_flickr"}
LANGS = ("en", "de")


def read_lines(path: Path) -> list[str]:
    "The lines of a text file that ends with a newline, without their newlines."
    text = path.read_text(encoding="utf-8")
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def make_hub_standin(src, out) -> Path:
    "Write OUT/{train,val,test}.jsonl from the en and de files in SRC; returns OUT."
    src, out = Path(src), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for hub_name, stem in HUB_FILES.items():
        columns = {lang: read_lines(src / f"{stem}.{lang}") for lang in LANGS}
        counts = {lang: len(lines) for lang, lines in columns.items()}
        if len(set(counts.values())) > 1:
            raise ValueError(f"{src}/{stem}.*: line counts differ: {counts}")
        rows = (dict(zip(LANGS, pair)) for pair in zip(*columns.values()))
        with open(out / f"{hub_name}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(make_hub_standin(sys.argv[1], sys.argv[2]))
