// dualgraph's graph view. Each panel holds a drawing (graph/dot.py's `drawing`: items with
// ids, label lines and the ids they read; nodes with subgraphs carry clusters). Where
// Graphviz drew the panel already its SVG is in the page; else this lays the drawing out
// in layers (each item one row below the lowest item it reads), draws boxes, clusters and
// edges as SVG, and then makes the nodes clickable: details on the side, and the memory
// plan's buffers highlighted with the values that share them (`page.html#ID` selects
// the node with that id).
"use strict";
const data = JSON.parse(document.getElementById("dg-data").textContent);
const NS = "http://www.w3.org/2000/svg";
const CHAR_W = 6.7, LINE_H = 14, PAD = 6, GAP_X = 18, GAP_Y = 30;  // 11px monospace
const items = new Map();   // item id -> item, for every panel and cluster

function svgEl(name, attrs, parent) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// Sizes every item (a node with clusters holds their layouts) and places it: returns
// {w, h, box: Map id -> {x, y, w, h}} in the drawing's own coordinates.
function layout(drawing) {
  const rank = new Map(), readers = new Map(), box = new Map();
  for (const it of drawing.items) {
    items.set(it.id, it);
    const textW = Math.max(...it.lines.map(l => l.length)) * CHAR_W + 2 * PAD;
    let w = textW, h = it.lines.length * LINE_H + 2 * PAD;
    if (it.subs) {   // the clusters side by side under the node's lines, each labelled
      it.subLayouts = it.subs.map(s => layout(s.drawing));
      it.subLayouts.forEach((l, j) => {   // (as wide as its label, the drawing centred)
        const labelW = it.subs[j].label.length * CHAR_W;
        l.dx = Math.max(0, (labelW - l.w) / 2);
        l.w = Math.max(l.w, labelW);
      });
      const inner = it.subLayouts.reduce((a, l) => a + l.w + GAP_X, -GAP_X);
      w = Math.max(w, inner + 2 * PAD);
      h += Math.max(...it.subLayouts.map(l => l.h)) + LINE_H + 2 * PAD;
    }
    box.set(it.id, {x: 0, y: 0, w, h});
    rank.set(it.id, it.from.length ? 1 + Math.max(...it.from.map(f => rank.get(f))) : 0);
    for (const f of it.from) {
      if (!readers.has(f)) readers.set(f, []);
      readers.get(f).push(it.id);
    }
  }
  // inputs and constants sit just above their first reader, not all in the top row
  for (const it of drawing.items) {
    if (!it.from.length && readers.has(it.id))
      rank.set(it.id, Math.max(0, Math.min(...readers.get(it.id).map(r => rank.get(r))) - 1));
  }
  const byRank = [];
  for (const it of drawing.items) (byRank[rank.get(it.id)] ||= []).push(it);
  const rows = byRank.filter(Boolean);
  const order = new Map();
  const place = row => row.forEach((it, i) => order.set(it.id, i));
  rows.forEach(place);
  // order each row by the mean place of what its items read (fewer crossing edges)
  for (let sweep = 0; sweep < 2; sweep++) {
    for (const row of rows.slice(1)) {
      const key = it => it.from.length ?
        it.from.reduce((a, f) => a + order.get(f), 0) / it.from.length : order.get(it.id);
      row.sort((a, b) => key(a) - key(b));
      place(row);
    }
  }
  const widths = rows.map(row => row.reduce((a, it) => a + box.get(it.id).w + GAP_X, -GAP_X));
  const width = Math.max(...widths, 0);
  let y = 0;
  rows.forEach((row, r) => {
    let x = (width - widths[r]) / 2;
    const rowH = Math.max(...row.map(it => box.get(it.id).h));
    for (const it of row) {
      Object.assign(box.get(it.id), {x, y});
      x += box.get(it.id).w + GAP_X;
    }
    y += rowH + GAP_Y;
  });
  return {w: width, h: Math.max(0, y - GAP_Y), box};
}

function draw(drawing, lay, parent, arrow) {
  for (const it of drawing.items) {
    const to = lay.box.get(it.id);
    for (const f of it.from) {
      const from = lay.box.get(f);
      const x1 = from.x + from.w / 2, y1 = from.y + from.h, x2 = to.x + to.w / 2, y2 = to.y;
      const bend = Math.max(10, (y2 - y1) / 2);
      svgEl("path", {class: "edge", "marker-end": `url(#${arrow})`,
                     d: `M${x1},${y1} C${x1},${y1 + bend} ${x2},${y2 - bend} ${x2},${y2}`},
            parent);
    }
  }
  for (const it of drawing.items) {
    const b = lay.box.get(it.id);
    const g = svgEl("g", {id: it.id, class: `node ${it.kind}`,
                          transform: `translate(${b.x},${b.y})`}, parent);
    svgEl("title", {}, g).textContent = it.tip || it.lines[0];
    const round = it.kind === "input" || it.kind === "return";
    svgEl("rect", {width: b.w, height: b.h, rx: round ? 14 : 2}, g);
    it.lines.forEach((line, i) => {
      const t = svgEl("text", {x: b.w / 2, y: PAD + (i + 0.8) * LINE_H,
                              "text-anchor": "middle"}, g);
      t.textContent = line;
    });
    let x = PAD;
    (it.subs || []).forEach((sub, j) => {
      const sl = it.subLayouts[j];
      const c = svgEl("g", {id: sub.id, class: `cluster ${sub.kind}`,
                            transform: `translate(${x},${it.lines.length * LINE_H + 2 * PAD})`},
                      g);
      svgEl("rect", {x: -PAD / 2, y: 0, width: sl.w + PAD, height: sl.h + LINE_H + PAD / 2,
                     rx: 6}, c);
      svgEl("text", {x: 2, y: LINE_H - 3}, c).textContent = sub.label;
      draw(sub.drawing, sl, svgEl("g", {transform: `translate(${sl.dx},${LINE_H})`}, c), arrow);
      x += sl.w + GAP_X;
    });
  }
}

function render(panel, canvas, arrow) {
  const lay = layout(panel.drawing);
  const w = lay.w + 20, h = lay.h + 20;
  const svg = svgEl("svg", {width: w, height: h, viewBox: `0 0 ${w} ${h}`}, canvas);
  const marker = svgEl("marker", {id: arrow, viewBox: "0 0 10 10", refX: 10, refY: 5,
                                  markerWidth: 6, markerHeight: 6, orient: "auto"},
                       svgEl("defs", {}, svg));
  svgEl("path", {d: "M0,0 L10,5 L0,10 z", fill: "#555"}, marker);
  draw(panel.drawing, lay, svgEl("g", {transform: "translate(10,10)"}, svg), arrow);
}

// Graphviz drew it: still note every item, for the details panel
function collect(drawing) {
  for (const it of drawing.items) {
    items.set(it.id, it);
    for (const s of it.subs || []) collect(s.drawing);
  }
}

function showDetails(it) {
  const aside = document.getElementById("details");
  aside.replaceChildren();
  const add = (tag, text, cls) => {
    const e = document.createElement(tag);
    e.textContent = text;
    if (cls) e.className = cls;
    aside.appendChild(e);
  };
  add("h2", it.op || it.kind);
  add("pre", it.lines.join("\n"));
  if (it.location) add("p", it.location);
  if (it.source) add("pre", it.source, "source");
  if (it.buffers && it.buffers.length) add("p", `buffers: ${it.buffers.join(", ")}`);
}

function select(it) {
  showDetails(it);
  if (it.buffers && it.buffers.length) highlight(it.buffers[0]);
}

function highlight(buffer) {
  document.querySelectorAll(".hl").forEach(e => e.classList.remove("hl"));
  document.querySelectorAll(`tr[data-buffer="${buffer}"]`).forEach(e => e.classList.add("hl"));
  for (const [id, it] of items) {
    if ((it.buffers || []).includes(buffer))
      document.querySelectorAll(`[id="${id}"]`).forEach(e => e.classList.add("hl"));
  }
}

data.panels.forEach((panel, k) => {
  const canvas = document.querySelector(`#panel${k} .canvas`);
  if (panel.graphviz) collect(panel.drawing);
  else render(panel, canvas, `arrow${k}`);
});
document.addEventListener("click", event => {
  const zoom = event.target.closest("button.zoom");
  if (zoom) {   // a panel's graph fitted to its width, or at its own size (scrolled)
    const fit = zoom.closest(".panel").querySelector(".canvas").classList.toggle("fit");
    zoom.textContent = fit ? "actual size" : "fit to width";
    return;
  }
  const row = event.target.closest("tr[data-buffer]");
  if (row) return highlight(Number(row.dataset.buffer));
  const node = event.target.closest(".node");
  if (node && items.has(node.id)) select(items.get(node.id));
});
// page.html#p1_n3 opens with that node selected
const chosen = items.get(decodeURIComponent(location.hash.slice(1)));
if (chosen) select(chosen);
document.body.dataset.rendered = data.panels.map(p => p.graphviz ? "dot" : "js").join(" ");
