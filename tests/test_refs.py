"""Every git ref that the repository names for a reader exists, and is the one it should be.

A reader follows refs in three ways: the install cell of every chapter (`pip install
"...@<ref>"`), the shipped model's download URL (`raw.githubusercontent.com/.../<ref>/models/...`)
and the links in the README, CHANGELOG and package metadata. Between releases all of them name
`main`; a release commit moves the version, `SOURCE_REF` and CHANGELOG's heading to the tag
`v<version>` together. These tests read the refs out of every tracked file and check them against
this clone's own branches and tags, and check that the path a link points at exists at that ref.
"""
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import annotated_transformer
from annotated_transformer import translator
from annotated_transformer.run import hub

ROOT = Path(__file__).resolve().parents[1]
REPO = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
ORG_REPO = REPO["url"].removeprefix("https://github.com/")
# <org>/<repo> followed by how a ref appears in each kind of URL; group "ref", optional "path"
FORMS = [
    rf"github\.com/{ORG_REPO}@(?P<ref>[\w.\-]+)",                                # pip, git+
    rf"github\.com/{ORG_REPO}/(?:blob|tree)/(?P<ref>[\w.\-]+)(?:/(?P<path>[\w.\-/]+))?",
    rf"github\.com/{ORG_REPO}/releases/tag/(?P<ref>[\w.\-]+)",
    rf"github\.com/{ORG_REPO}/compare/(?P<ref>[\w.\-]+?)\.\.\.",
    rf"github\.com/{ORG_REPO}/compare/[\w.\-]+?\.\.\.(?P<ref>[\w.\-]+)",
    rf"raw\.githubusercontent\.com/{ORG_REPO}/(?P<ref>[\w.\-]+)(?:/(?P<path>[\w.\-/]+))?",
]


def git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def tracked_text_files() -> list[Path]:
    names = git("ls-files").stdout.splitlines()
    skip = (".png", ".jpg", ".safetensors", ".model", ".pdf", ".woff", ".woff2")
    return [ROOT / n for n in names if not n.endswith(skip) and (ROOT / n).is_file()]


def named_refs() -> list[tuple[str, str, str | None]]:
    "(where, ref, path at the ref or None) for every ref a tracked file names."
    found = []
    for f in tracked_text_files():
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        text = text.replace("\\n", "\n")          # notebook JSON: one source line a string
        for form in FORMS:
            for m in re.finditer(form, text):
                path = m.groupdict().get("path")
                found.append((str(f.relative_to(ROOT)), m["ref"], path and path.rstrip("/.")))
    found.append(("_config.yml (repository.branch)", REPO["branch"], None))
    found.append(("annotated_transformer/translator.py (SOURCE_REF)", translator.SOURCE_REF,
                  None))
    return found


def exists(ref: str) -> bool:
    return any(git("rev-parse", "--verify", "--quiet", f"{prefix}{ref}^{{commit}}").returncode
               == 0 for prefix in ("refs/heads/", "refs/tags/", "refs/remotes/origin/"))


def changelog_head() -> tuple[str, bool]:
    "The newest version in CHANGELOG.md, and whether it is still unreleased."
    m = re.search(r"^## \[(\d+\.\d+\.\d+)\] - (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert m, "CHANGELOG.md has no '## [X.Y.Z] - date' or '## [X.Y.Z] - unreleased' heading"
    return m[1], m[2].strip() == "unreleased"


def test_refs_are_found():
    "The scan sees the install cells, the model URL and the README: it cannot pass empty."
    where = {w for w, _, _ in named_refs()}
    assert {"README.md", "nbs/01_attention.ipynb", "nbs/11a_hub.ipynb"} <= where
    assert sum(w.startswith("nbs/") for w in where) >= 20


def test_version_ref_and_changelog_agree():
    version, unreleased = changelog_head()
    assert version == annotated_transformer.__version__, (
        f"CHANGELOG's newest version {version} != __version__ "
        f"{annotated_transformer.__version__}: move them together")
    wanted = "main" if unreleased else f"v{version}"
    assert translator.SOURCE_REF == wanted, (
        f"SOURCE_REF is {translator.SOURCE_REF!r} but CHANGELOG says {version} is "
        f"{'unreleased' if unreleased else 'released'}: it should be {wanted!r}")


def test_every_named_ref_is_main_or_the_release_tag():
    version, unreleased = changelog_head()
    allowed = {"main"} if unreleased else {"main", f"v{version}"}
    bad = sorted({(w, r) for w, r, _ in named_refs() if r not in allowed})
    assert not bad, f"refs other than {sorted(allowed)}: {bad}"


@pytest.mark.skipif(git("rev-parse", "--git-dir").returncode != 0, reason="not a git clone")
def test_every_named_ref_and_path_exists():
    missing = []
    for where, ref, path in named_refs():
        if not exists(ref):
            missing.append(f"{where}: ref {ref!r} does not exist in this repository")
        elif path and git("cat-file", "-e", f"{ref}:{path}").returncode != 0:
            missing.append(f"{where}: {path} does not exist at {ref}")
    assert not missing, "\n".join(missing)


def test_shipped_models_exist_at_the_ref():
    for name in hub.SHIPPED_MODELS:
        for file in (hub.CONFIG_FILE, hub.WEIGHTS_FILE, hub.TOKENIZER_FILE):
            ref = translator.SOURCE_REF
            assert git("cat-file", "-e", f"{ref}:models/{name}/{file}").returncode == 0, \
                f"models/{name}/{file} is not committed at {ref}"
