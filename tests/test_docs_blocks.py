"""Every ```python block of README.md and docs/ runs, page by page, as a reader would run it.

A page's ```python blocks run in order in one namespace, in a fresh interpreter whose working
directory is an empty temporary folder (pages save files), so a block may use the names an
earlier block of its page defined. Tracebacks name the Markdown file and its line. Other
fences are not run: ```pycon for interactive sessions (a debugger), ```text for output and
generated code, ```bash for shell commands, ```json and the like for data. A block quoting
dualgraph's own source for reading is fenced ```py with ``title="path/to/file.py"`` and is
checked instead: every line of it (but ``...``) must still be a line of that file.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))
# A fence, indented when it sits in a list item: its indent and info string (language and
# attributes); a closing fence has no info string.
FENCE = re.compile(r"^( *)```(.*)$")
NOT_RUN = {"pycon", "text", "bash", "sh", "console", "json", "yaml", "toml", "ini"}
PAGE_SECONDS = 120     # per page, a generous bound on two shared cores (pages take 1-6 s)

# Runs the blocks given as (path, first line, source) in one namespace, each compiled under
# the page's path with its own line numbers, so a traceback shows the Markdown line.
RUNNER = """
import json, sys
ns = {"__name__": "__main__"}
for path, line, source in json.load(sys.stdin):
    exec(compile("\\n" * (line - 1) + source, path, "exec"), ns)
"""


def fences(path: Path) -> list[tuple[str, int, str]]:
    """The page's fenced blocks as (info string, line of the first code line, code), the
    code without the fence's indent."""
    blocks, info, start, indent, body = [], None, 0, "", []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if info is None and match:
            indent, info, start, body = match.group(1), match.group(2).strip(), number + 1, []
        elif info is not None and line.rstrip() == indent + "```":
            blocks.append((info, start, "\n".join(body) + "\n"))
            info = None
        elif info is not None:
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
    assert info is None, f"{path}: a ``` fence opened at line {start - 1} is never closed"
    return blocks


def page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_fence_says_how_it_is_checked(page):
    """A block is run (python), checked against the file it quotes (py title=...), or
    named as something that is not run; a bare ``` leaves the reader and the test guessing."""
    for info, line, _ in fences(page):
        language = info.split()[0] if info else ""
        quoted = re.fullmatch(r'py title="([^"]+)"', info)
        assert language == "python" or language in NOT_RUN or quoted, (
            f"{page_id(page)}:{line - 1}: fence {info!r}: use ```python (run), "
            f"```py title=\"dualgraph/FILE.py\" (a quoted excerpt) or one of {sorted(NOT_RUN)}")


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_quoted_source_is_current(page):
    for info, line, code in fences(page):
        quoted = re.fullmatch(r'py title="([^"]+)"', info)
        if not quoted:
            continue
        source = ROOT / quoted.group(1)
        assert source.is_file(), f"{page_id(page)}:{line - 1}: no file {quoted.group(1)}"
        lines = {text.strip() for text in source.read_text().splitlines()}
        for offset, text in enumerate(code.splitlines()):
            if text.strip() and text.strip() != "...":
                assert text.strip() in lines, (
                    f"{page_id(page)}:{line + offset}: {text.strip()!r} is no longer a line "
                    f"of {quoted.group(1)}; quote the current code")


PYTHON_PAGES = [p for p in PAGES if any(info == "python" for info, _, _ in fences(p))]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_python_blocks_run(page, tmp_path):
    import json
    blocks = [(str(page), line, code) for info, line, code in fences(page) if info == "python"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               # no JIT compiles: the pages show capture, passes and results, which the
               # NumPy fallback computes alike; a compile costs seconds per page
               DUALGRAPH_NUMBA="0", DUALGRAPH_COMPILE_WORKER="0", MPLBACKEND="Agg")
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", RUNNER], input=json.dumps(blocks),
                            capture_output=True, text=True, cwd=tmp_path, env=env,
                            timeout=PAGE_SECONDS)
    seconds = time.perf_counter() - start
    if result.returncode:
        pytest.fail(f"a ```python block of {page_id(page)} failed ({seconds:.1f} s):\n"
                    f"{result.stderr}", pytrace=False)
