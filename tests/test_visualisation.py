"""The graph views: ``graph.to_dot()``, ``graph.to_html(path)``, ``compiled.show()``,
``dg.onnx.to_html`` and ``dualgraph show --html`` (dualgraph/graph/html.py, page.js).

The pages are checked as text (every node there, everything escaped, Graphviz's input and
output well formed) and in a real browser: headless Chromium (Debian's ``chromium``
package) runs the page's script, and the tests read the DOM it leaves
(``--dump-dom``) and a screenshot (decoded here with zlib, so no imaging library is
needed). Without Chromium those tests skip, saying so; without Graphviz's ``dot`` the
tests of its SVG skip and the page's own layout is still tested.
"""
from __future__ import annotations

import argparse
import html
import html.parser
import importlib.util
import json
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib

import numpy as np
import pytest

import dualgraph as dg
from dualgraph.graph import Graph, html as graph_html, write_html
from dualgraph.ops.opdef import REGISTRY, OpDef
from dualgraph.cli import show as show_cli

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                 "google-chrome"))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH: the browser tests need Debian's chromium "
    "package (apt-get install -y chromium; .ci/run installs it)")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (apt-get install graphviz)")
# Chromium's own headless mode, offline and with a fresh profile per test
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=5000"]
NASTY = 'a<b && c > "d" \'e\' </script><script>alert(1)</script>'   # a source line's text


def step_model():
    """A compiled step whose optimised graph has a fused group (with x*2*3 -> x*6) and a
    memory plan; the captured function's lines are this file's."""
    dg.manual_seed(0)
    model = dg.nn.Sequential(dg.nn.Linear(4, 8), dg.nn.ReLU(), dg.nn.Linear(8, 2))

    def step(x):
        h = model(x) * 2 * 3
        return (dg.tanh(h) + 1).sum(dim=1)

    f = dg.compile(step)
    f(dg.randn(16, 4))
    return f


def all_items(drawing):
    for item in drawing["items"]:
        yield item
        for sub in item.get("subs", ()):
            yield from all_items(sub["drawing"])


def page_data(text: str) -> dict:
    m = re.search(r'<script type="application/json" id="dg-data">(.*?)</script>', text, re.S)
    return json.loads(m[1])


def nodes_of(graph: Graph):
    for node in graph.nodes:
        yield node
        for _, sub in dg.graph.subgraphs(node.attrs):
            yield from nodes_of(sub)


@pytest.fixture
def nasty_graph(tmp_path, monkeypatch):
    """A graph whose op name and source line hold <, >, &, quotes and a </script>."""
    op = OpDef('my<op>&"q"', kernel=lambda x: x, infer=lambda x: x.type)
    monkeypatch.setitem(REGISTRY, op.name, op)
    source = tmp_path / "user.py"
    source.write_text(f"x = 1\ny = {NASTY}\n")
    g = Graph()
    x = g.add_input((2, 3), "float32", name="x")
    (y,) = g.add_node(op, [x], location=f"{source}:2")
    (z,) = g.add_node("exp", [y], location="<stdin>:1")
    g.set_outputs([z])
    return g


# -- the page as text ------------------------------------------------------------------------
def test_page_holds_every_node_and_cluster(tmp_path):
    f = step_model()
    path = f.show(tmp_path / "step.html")
    text = open(path, encoding="utf-8").read()
    data = page_data(text)
    assert [p["heading"] for p in data["panels"]] == ["captured", "optimised"]
    for panel, graph in zip(data["panels"], (f.capture.graph, f.optimized_graph)):
        ops = sorted(i["op"] for i in all_items(panel["drawing"]) if i["kind"] == "op")
        assert ops == sorted(n.op.name for n in nodes_of(graph))
    optimised = list(all_items(data["panels"][1]["drawing"]))
    # the fused group is a cluster holding x*6 (the passes' work, visible) and tanh
    (fused,) = [i for i in optimised if "subs" in i]
    (cluster,) = fused["subs"]
    assert cluster["kind"] == "group" and cluster["label"] == "fused @graph"
    inside = [i["lines"][0] for i in all_items(cluster["drawing"])]
    assert "mul(6)" in inside and "tanh" in inside
    # shapes, dtypes and the user's source line
    tanh = next(i for i in all_items(cluster["drawing"]) if i["lines"][0] == "tanh")
    assert tanh["lines"][1] == "%tanh: f32[16,2]"
    assert tanh["source"] == "return (dg.tanh(h) + 1).sum(dim=1)"
    assert tanh["location"].startswith(__file__) and tanh["tip"].endswith(tanh["source"])
    # the memory plan: each planned value's buffer on its node and in the table
    plan = dg.passes.plan_in(f._last.reports)
    for v, k in plan.assignment.items():
        assert any(f"%{v.name}: " in line and line.endswith(f"buffer {k}")
                   for i in optimised for line in i["lines"])
        assert re.search(rf'<tr data-buffer="{k}">.*%{re.escape(v.name)}\b', text)
    assert "Memory plan" in text and html.escape(plan.summary()) in text


def test_html_escapes_names_and_source_lines(nasty_graph, tmp_path):
    path = nasty_graph.to_html(tmp_path / "g.html", title="<title> & co", layout="js")
    text = open(path, encoding="utf-8").read()
    # the only elements are the page's own: no text of the graph's opened one
    assert text.count("<script") == 2 and "alert(1)</script>" not in text
    assert "<title>&lt;title&gt; &amp; co</title>" in text
    items = list(all_items(page_data(text)["panels"][0]["drawing"]))
    op = next(i for i in items if i["kind"] == "op")
    assert op["op"] == 'my<op>&"q"' and op["source"] == f"y = {NASTY}"
    assert items[2]["location"] == "<stdin>:1" and items[2]["source"] == ""

    tags = []   # the page parses into the page's own elements only

    class Collect(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append(tag)

    Collect().feed(text)
    assert tags.count("script") == 2 and tags.count("title") == 1 and "svg" not in tags


def test_sources_false_leaves_source_text_out(nasty_graph, tmp_path):
    text = open(nasty_graph.to_html(tmp_path / "g.html", sources=False, layout="js")).read()
    assert "alert" not in text and "user.py:2" in text


@needs_dot
def test_graphviz_svg_is_embedded_and_escaped(nasty_graph, tmp_path):
    dot = nasty_graph.to_dot()
    done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr
    svg = ET.fromstring(done.stdout)
    texts = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert 'my<op>&"q"' in texts and "%exp: f32[2,3]" in texts
    tips = [a.get("{http://www.w3.org/1999/xlink}title")
            for a in svg.iter("{http://www.w3.org/2000/svg}a")]
    assert any(t.endswith(f"y = {NASTY}") for t in tips)
    text = open(nasty_graph.to_html(tmp_path / "g.html", layout="dot")).read()
    assert page_data(text)["panels"][0]["graphviz"] is True
    assert text.count("<script") == 2 and "<?xml" not in text and 'id="node1"' not in text
    svg_text = re.search(r"<svg\b.*?</svg>", text, re.S)[0]
    embedded = ET.fromstring(svg_text)   # well-formed XML, with our ids on the nodes
    ids = {e.get("id") for e in embedded.iter()}
    assert {"p0_in0", "p0_n0", "p0_n1", "p0_out"} <= ids


def test_dot_text_parses_with_clusters():
    f = step_model()
    dot = f.optimized_graph.to_dot(plan=dg.passes.plan_in(f._last.reports))
    assert "subgraph cluster_g_n2_s0 {" in dot and 'label="fused @graph"' in dot
    assert "buffer 0" in dot and dot.count("{") == dot.count("}")
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tsvg"], input=dot.encode(), capture_output=True)
        assert done.returncode == 0, done.stderr
        ET.fromstring(done.stdout)


def test_graphviz_failure_falls_back_to_the_page_layout(nasty_graph, tmp_path, monkeypatch):
    monkeypatch.setattr(graph_html.shutil, "which", lambda name: "/bin/false")
    text = open(nasty_graph.to_html(tmp_path / "g.html")).read()
    assert "Graphviz failed" in text and page_data(text)["panels"][0]["graphviz"] is False
    monkeypatch.setattr(graph_html.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="install graphviz"):
        nasty_graph.to_html(tmp_path / "h.html", layout="dot")
    assert "Laid out in the page" in open(nasty_graph.to_html(tmp_path / "h.html")).read()


def test_written_atomically(nasty_graph, tmp_path):
    path = tmp_path / "g.html"
    path.write_text("old")
    with pytest.raises(ValueError, match="layout"):
        nasty_graph.to_html(path, layout="nope")
    assert path.read_text() == "old"
    assert nasty_graph.to_html(path, layout="js") == str(path)
    assert "my\\u003cop\\u003e" in path.read_text()
    assert sorted(os.listdir(tmp_path)) == ["g.html", "user.py"]   # no temp file left


def test_show_writes_a_temp_file_and_opens_only_when_asked(monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", opened.append)
    f = dg.compile(lambda x: dg.exp(x) + 1)
    with pytest.raises(RuntimeError, match="call the compiled function first"):
        f.show()
    f(dg.ones(3))
    path = f.show()
    try:
        assert path.endswith(".html") and "dg.compile of" in open(path).read()
        assert opened == []
        assert f.show(path, open_browser=True) == path
        assert opened == ["file://" + os.path.realpath(path)]
    finally:
        os.remove(path)


def test_onnx_to_html(tmp_path):
    pytest.importorskip("onnx")
    model = dg.nn.Sequential(dg.nn.Linear(3, 4), dg.nn.Tanh())
    dg.onnx.export(lambda x: model(x) * 2 + 1, (dg.ones(2, 3),), tmp_path / "m.onnx")
    for source in (tmp_path / "m.onnx", dg.onnx.load(tmp_path / "m.onnx")):
        out = dg.onnx.to_html(source, tmp_path / "m.html")
        data = page_data(open(out).read())
        assert [p["heading"] for p in data["panels"]] == ["imported", "optimised"]
        ops = [i["op"] for i in all_items(data["panels"][0]["drawing"]) if i["kind"] == "op"]
        assert ops == ["linear", "tanh", "mul", "add"]
        assert all(i.get("source", "") == "" for i in all_items(data["panels"][1]["drawing"]))


def test_show_command(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="dualgraph show")
    show_cli.add_arguments(parser)
    f = dg.jit.trace(lambda x: dg.tanh(x * 2 * 3) + 1, dg.ones(8))
    f.save(tmp_path / "g.json")
    assert show_cli.run(parser.parse_args([str(tmp_path / "g.json")])) == 0
    out = capsys.readouterr().out
    assert "g.json: dualgraph graph" in out and "mul" in out and "memory plan" in out
    assert not (tmp_path / "g.html").exists()
    assert show_cli.run(parser.parse_args([str(tmp_path / "g.json"), "--html"])) == 0
    data = page_data((tmp_path / "g.html").read_text())
    assert [p["heading"] for p in data["panels"]] == ["g.json", "optimised"]
    if importlib.util.find_spec("onnx"):
        dg.onnx.export(lambda x: x * 2, (dg.ones(2),), tmp_path / "m.onnx")
        args = parser.parse_args([str(tmp_path / "m.onnx"), "--html", str(tmp_path / "v.html")])
        assert show_cli.run(args) == 0 and (tmp_path / "v.html").exists()
    assert show_cli.run(parser.parse_args([str(tmp_path / "missing.json")])) == 1
    assert "dualgraph show: " in capsys.readouterr().err


# -- the page in a browser ---------------------------------------------------------------
def chromium(tmp_path, *args) -> bytes:
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done.stdout


def png_pixels(data: bytes) -> np.ndarray:
    """An 8-bit RGB or RGBA PNG as an array (height, width, channels): its IDAT chunks
    inflated with zlib, each row unfiltered as the PNG specification says (filters 1, 3
    and 4 read the bytes to the left: a loop, under a second for a screenshot)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    n = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * n
    prev, rows = bytes(stride), []
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if kind == 1:     # Sub
            for i in range(n, stride):
                row[i] = (row[i] + row[i - n]) & 255
        elif kind == 2:   # Up
            row = bytearray((np.frombuffer(row, np.uint8) + np.frombuffer(prev, np.uint8))
                            .tobytes())
        elif kind == 3:   # Average
            for i in range(stride):
                row[i] = (row[i] + ((row[i - n] if i >= n else 0) + prev[i]) // 2) & 255
        elif kind == 4:   # Paeth
            for i in range(stride):
                a, b, c = (row[i - n], prev[i], prev[i - n]) if i >= n else (0, prev[i], 0)
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(row))
        prev = rows[-1]
    return np.frombuffer(b"".join(rows), np.uint8).reshape(height, width, n)


@needs_chromium
@pytest.mark.parametrize("layout", ["js", pytest.param("dot", marks=needs_dot)])
def test_rendered_in_chromium(tmp_path, layout):
    f = step_model()
    path = f.show(tmp_path / "step.html")
    if layout == "js":   # (the page's own layout, also where Graphviz is installed)
        plan = dg.passes.plan_in(f._last.reports)
        write_html(path, [("captured", f.capture.graph), ("optimised", f.optimized_graph)],
                   plan, layout="js")
    url = "file://" + os.path.realpath(path) + "#p1_n0"   # (opens with node p1_n0 selected)
    dom = chromium(tmp_path, "--dump-dom", url).decode()
    assert f'data-rendered="{layout} {layout}"' in dom
    # every node drawn, with its id, op, output type and source; the fused cluster
    for k, graph in enumerate((f.capture.graph, f.optimized_graph)):
        for i, node in enumerate(graph.nodes):
            assert re.search(rf'<g id="p{k}_n{i}" class="node', dom), (k, i, node)
    assert 'id="cluster_p1_n2_s0" class="cluster' in dom and "fused @graph" in dom
    assert "mul(6)" in dom and "%tanh: f32[16,2]" in dom and "buffer 0" in dom
    assert "return (dg.tanh(h) + 1).sum(dim=1)" in dom
    # the details panel shows the selected node, and its buffer's row is highlighted
    details = re.search(r'<aside id="details">(.*?)</aside>', dom, re.S)[1]
    assert "<h2>linear_relu</h2>" in details and "h = model(x) * 2 * 3" in details
    assert '<tr data-buffer="0" class="hl">' in dom
    if layout == "js":
        # clicks, by a script added to a copy of the page: a zoom button, a buffer's row,
        # then a node of the first panel
        clicks = """<script>
          document.querySelector("#panel0 button.zoom").click();
          document.querySelector('tr[data-buffer="1"]').click();
          document.querySelector('[id="p0_n1"] rect').dispatchEvent(
            new MouseEvent("click", {bubbles: true}));
        </script></body>"""
        clicked = tmp_path / "clicked.html"
        clicked.write_text(open(path).read().replace("</body>", clicks))
        dom = chromium(tmp_path, "--dump-dom", "file://" + str(clicked)).decode()
        assert '<div class="canvas">' in dom and "fit to width</button>" in dom
        assert '<tr data-buffer="1" class="hl">' in dom
        assert re.search(r'<g id="p1_n1" class="node op hl"', dom)   # %linear_1, buffer 1
        details = re.search(r'<aside id="details">(.*?)</aside>', dom, re.S)[1]
        assert "<h2>relu</h2>" in details and "%relu: f32[16,8]" in details
        chromium(tmp_path, "--window-size=1200,900", f"--screenshot={tmp_path / 'shot.png'}",
                 url)
        pixels = png_pixels((tmp_path / "shot.png").read_bytes())
        assert pixels.shape[:2] == (900, 1200)
        inked = (pixels[..., :3] < 200).any(axis=-1)   # darker than the white background
        assert inked.mean() > 0.01, "the screenshot is blank"
        # the boxes and edges of both graphs: ink in the left and the middle third
        assert inked[100:, :400].mean() > 0.005 and inked[100:, 400:800].mean() > 0.005


def test_docs_examples_run(tmp_path, monkeypatch):
    """docs/visualisation.md's Python blocks run as written, in that order."""
    text = open(os.path.join(os.path.dirname(__file__), "..", "docs", "visualisation.md")).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "docs/visualisation.md", "exec"), {"__name__": "__docs__"})
