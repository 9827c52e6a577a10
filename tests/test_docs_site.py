"""The documentation site builds with no warnings, its generated pages are current, and the
README and docs point at nothing outside the repository.

The site: `pip install -e ".[docs]" && mkdocs build --strict` (mkdocs.yml). Strict mode
fails on a page missing from the nav, a nav entry without a page, and a link or anchor
that leads nowhere. Every code block is checked by tests/test_docs_blocks.py.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def test_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason='the site needs the docs extra: pip install -e ".[docs]"')
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    for page in ("index.html", "tutorial/index.html", "reference/ops/index.html",
                 "porting/index.html", "architecture/index.html"):
        assert (tmp_path / page).is_file(), page
    assert "x * 6" in (tmp_path / "tutorial" / "index.html").read_text()


@pytest.mark.parametrize("script", ["gen_ops_doc.py", "gen_missing_names_doc.py"])
def test_generated_pages_are_current(script):
    """docs/reference/ops.md (from the op registry) and missing.md (from the pinned torch)
    are what their scripts write now: a new op or name shows up or the test says how."""
    result = subprocess.run([sys.executable, str(ROOT / "tools" / script), "--check"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_ops_page_lists_every_registry_op():
    import dualgraph  # noqa: F401
    from dualgraph.ops import REGISTRY
    text = (ROOT / "docs" / "reference" / "ops.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", text, re.M))
    assert listed == set(REGISTRY), sorted(listed ^ set(REGISTRY))


# A path outside the checkout (a sibling folder, this machine's work tree): readers of the
# repository don't have it.
OUTSIDE = re.compile(r"\.\./shared|\bshared/[A-Z]+\.md|/work/|/home/|/tmp/|/root/")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_points_outside_the_repository(page):
    text = page.read_text()
    for number, line in enumerate(text.splitlines(), 1):
        assert not OUTSIDE.search(line), f"{page.relative_to(ROOT)}:{number}: {line.strip()}"
    for target in re.findall(r"\]\(([^)#\s]+)", text):     # relative Markdown links
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT) and resolved.exists(), (
            f"{page.relative_to(ROOT)}: link to {target}, which is not in the repository")


def test_readme_is_a_short_users_page():
    """The README starts with the two set-up commands, the second being exactly what CI runs
    (.ci/run), and stays a page a newcomer reads to the end: run logs go to
    docs/benchmarks.md."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    assert lines[:2] == ["# dualgraph", ""] and lines[2] == "```bash" and lines[5] == "```"
    install, test = lines[3], lines[4]
    assert install.startswith("pip install -e ") and "python -m dualgraph demo" in install
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert test == ci, f"README's test command {test!r} is not what .ci/run runs: {ci!r}"
