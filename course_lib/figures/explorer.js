// The course's explorer: attention, next-token choice and positions, drawn from plain data.
// One file serves JupyterLab, VS Code and Colab (as an anywidget module) and the static website (the same
// render() on a stand-in model holding the data). Nothing is fetched: everything needed is in `data`.
// Each view records how long its last update took in el.dataset.updateMs (the latency benchmark reads it).

const STYLE = `
.cx-root { font: 13px/1.4 system-ui, sans-serif; color: #222; }
.cx-controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 4px 0 8px; }
.cx-controls label { display: inline-flex; gap: 4px; align-items: center; }
.cx-tokens { display: flex; flex-wrap: wrap; gap: 3px; margin: 4px 0; }
.cx-token { padding: 1px 4px; border: 1px solid #ccc; border-radius: 3px; cursor: pointer; white-space: pre; }
.cx-token.cx-active { outline: 2px solid #d62728; }
.cx-row-label { font-weight: 600; margin-top: 6px; }
.cx-heads { display: flex; flex-wrap: wrap; gap: 10px; }
.cx-bars { display: grid; grid-template-columns: max-content 1fr max-content; gap: 2px 6px; align-items: center; }
.cx-bar { height: 12px; background: #1f77b4; }
.cx-bar.cx-out { background: #ccc; }
.cx-name.cx-out, .cx-value.cx-out { color: #aaa; text-decoration: line-through; }
.cx-note { color: #555; margin: 4px 0; }
`;

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function select(label, options, value, onchange) {
  const menu = h("select", { onchange: (e) => onchange(e.target.value) });
  options.forEach(([v, text]) => {
    const option = h("option", { value: String(v) }, text);
    if (String(v) === String(value)) option.selected = true;
    menu.append(option);
  });
  return h("label", {}, label, menu);
}

function slider(label, min, max, step, value, oninput, name) {
  const shown = h("span", { className: "cx-value-shown" }, value);
  const input = h("input", { type: "range", min, max, step, value, "data-name": name,
    oninput: (e) => { shown.textContent = e.target.value; oninput(Number(e.target.value)); } });
  return h("label", {}, label, input, shown);
}

function blue(weight) {  // 0 -> white, 1 -> dark blue
  const w = Math.max(0, Math.min(1, weight));
  return `rgb(${Math.round(255 - 224 * w)}, ${Math.round(255 - 136 * w)}, ${Math.round(255 - 75 * w)})`;
}

function timed(el, draw) {
  const start = performance.now();
  draw();
  el.dataset.updateMs = (performance.now() - start).toFixed(3);
  el.dataset.updates = String(Number(el.dataset.updates || 0) + 1);
}

// ---- attention: hover a token to see where it looks (query) or what looks at it (key) ----

function attentionView(data, el, model) {
  const state = { input: 0, layer: data.inputs[0].layers.length - 1, head: "all", hover: null };
  const controls = h("div", { className: "cx-controls" });
  const body = h("div");
  el.append(controls, body);

  const means = new Map();  // (input, layer) -> the mean over heads, computed once
  function weightsOf(input, head) {  // (q, k) for one head, or the mean over heads
    const heads = input.layers[state.layer];
    if (head !== "all") return heads[Number(head)];
    const key = `${state.input}/${state.layer}`;
    if (!means.has(key)) {
      means.set(key, heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, m) => s + m[i][j], 0) / heads.length)));
    }
    return means.get(key);
  }

  function drawControls() {
    const input = data.inputs[state.input];
    controls.replaceChildren(
      select("input ", data.inputs.map((x, i) => [i, x.label]), state.input, (v) => {
        state.input = Number(v); state.layer = Math.min(state.layer, data.inputs[state.input].layers.length - 1);
        state.hover = null; drawControls(); draw(); }),
      select("layer ", input.layers.map((_, i) => [i, String(i + 1)]), state.layer,
        (v) => { state.layer = Number(v); draw(); }),
      select("head ", [["all", "all, side by side"], ...input.layers[0].map((_, i) => [i, headName(i)])],
        state.head, (v) => { state.head = v; draw(); }));
    if (model && data.editable) {
      const box = h("input", { type: "text", value: input.text || "", size: 40, "data-name": "query" });
      const go = h("button", { onclick: () => { model.set("query", box.value); model.save_changes(); } }, "run");
      controls.append(h("label", {}, "your own ", box), go);
    }
  }

  function headName(i) {
    const groups = data.groups;
    return groups ? `${i + 1} (key/value head ${groups[i] + 1})` : String(i + 1);
  }

  function tokenStrip(tokens, side) {
    return h("div", { className: "cx-tokens", "data-side": side }, ...tokens.map((text, i) =>
      h("span", { className: "cx-token", "data-index": i, "data-weight": "",
        onmouseenter: () => { state.hover = { side, index: i }; timed(el, highlight); } }, text)));
  }

  function grid(weights, title) {  // one head's (q, k) weights as a small image: a canvas paints fast
    const cell = Math.max(2, Math.min(9, Math.floor(160 / Math.max(weights.length, weights[0].length))));
    const canvas = h("canvas", { width: weights[0].length * cell, height: weights.length * cell, title });
    const ctx = canvas.getContext("2d");
    weights.forEach((row, i) => row.forEach((w, j) => {
      ctx.fillStyle = blue(w);
      ctx.fillRect(j * cell, i * cell, cell, cell);
    }));
    return h("div", {}, h("div", { className: "cx-note" }, title), canvas);
  }

  // Hover: recolour the two token strips in place (the nodes stay, so the pointer stays on its token).
  function highlight() {
    const weights = weightsOf(data.inputs[state.input], state.head);
    for (const side of ["query", "key"]) {
      const strip = body.querySelector(`[data-side=${side}]`);
      let shown = null;
      if (state.hover && state.hover.side !== side) {
        shown = side === "key" ? weights[state.hover.index] : weights.map((row) => row[state.hover.index]);
      }
      const top = shown ? Math.max(...shown, 1e-9) : 1;
      Array.from(strip.children).forEach((token, i) => {
        const active = state.hover && state.hover.side === side && state.hover.index === i;
        token.classList.toggle("cx-active", Boolean(active));
        token.dataset.weight = shown ? shown[i].toFixed(4) : "";
        token.style.background = shown ? blue(shown[i] / top) : "";
      });
    }
  }

  function draw() {
    const input = data.inputs[state.input];
    const headsShown = state.head === "all"
      ? input.layers[state.layer].map((w, i) => grid(w, `head ${headName(i)}`))
      : [grid(input.layers[state.layer][Number(state.head)], `head ${headName(Number(state.head))}`)];
    body.replaceChildren(
      h("div", { className: "cx-note" }, data.note || ""),
      h("div", { className: "cx-row-label" }, data.query_label || "queries (hover: where it looks)"),
      tokenStrip(input.query_tokens, "query"),
      h("div", { className: "cx-row-label" }, data.key_label || "keys (hover: what looks at it)"),
      tokenStrip(input.key_tokens, "key"),
      h("div", { className: "cx-heads" }, ...headsShown));
    highlight();
  }

  drawControls();
  timed(el, draw);
}

// ---- generation: the next-token distribution under temperature, top-k and top-p ----

export function filtered(logits, temperature, topK, topP) {
  // The rules of course_lib.generation.sampling: divide by the temperature, keep the top-k (and ties with the
  // k-th), then the smallest most probable set reaching top-p (and ties with the last kept).
  const scaled = logits.map((x) => x / temperature);
  let keep = scaled.map(() => true);
  if (topK > 0 && topK < scaled.length) {
    const kth = [...scaled].sort((a, b) => b - a)[topK - 1];
    keep = scaled.map((x) => x >= kth);
  }
  const probsOf = (mask) => {
    const max = Math.max(...scaled.filter((_, i) => mask[i]));
    const exps = scaled.map((x, i) => (mask[i] ? Math.exp(x - max) : 0));
    const total = exps.reduce((a, b) => a + b, 0);
    return exps.map((e) => e / total);
  };
  if (topP < 1) {
    const probs = probsOf(keep);
    const order = probs.map((p, i) => [p, i]).filter(([, i]) => keep[i]).sort((a, b) => b[0] - a[0]);
    let before = 0, kept = 0;
    for (const [p] of order) { if (before < topP) { kept += 1; before += p; } else break; }
    const threshold = scaled[order[Math.max(kept, 1) - 1][1]];
    keep = keep.map((k, i) => k && scaled[i] >= threshold);
  }
  return { probs: probsOf(keep), keep };
}

function generationView(data, el) {
  const state = { step: 0, temperature: data.temperature ?? 1, topK: data.top_k ?? 0, topP: data.top_p ?? 1 };
  const controls = h("div", { className: "cx-controls" });
  const body = h("div");
  el.append(controls, body);
  controls.append(
    slider("step ", 0, data.steps.length - 1, 1, 0, (v) => { state.step = v; timed(el, draw); }, "step"),
    slider("temperature ", 0.1, 2, 0.05, state.temperature, (v) => { state.temperature = v; timed(el, draw); },
      "temperature"),
    slider("top-k (0 = off) ", 0, Math.min(100, data.vocab.length), 1, state.topK,
      (v) => { state.topK = v; timed(el, draw); }, "top_k"),
    slider("top-p ", 0.05, 1, 0.05, state.topP, (v) => { state.topP = v; timed(el, draw); }, "top_p"));

  function draw() {
    const step = data.steps[state.step];
    const { probs, keep } = filtered(step.logits, state.temperature, state.topK, state.topP);
    const shown = step.logits.map((x, i) => i).sort((a, b) => step.logits[b] - step.logits[a]).slice(0, data.bars);
    const bars = h("div", { className: "cx-bars" });
    for (const i of shown) {
      const out = keep[i] ? "" : " cx-out";
      const bar = h("div", { className: "cx-bar" + out, "data-token": i, "data-prob": probs[i].toFixed(6) });
      bar.style.width = `${(100 * probs[i]) / Math.max(...probs)}%`;
      bar.style.minWidth = "1px";
      body.dataset.kept = String(keep.filter(Boolean).length);
      bars.append(h("span", { className: "cx-name" + out }, JSON.stringify(data.vocab[i])), bar,
        h("span", { className: "cx-value" + out }, probs[i].toFixed(3)));
    }
    body.replaceChildren(
      h("div", { className: "cx-note" }, data.note || ""),
      h("div", {}, h("b", {}, "context: "), step.context),
      h("div", {}, h("b", {}, "the model chose: "), JSON.stringify(data.vocab[step.chosen]),
        ` (its probability here: ${probs[step.chosen].toFixed(3)})`),
      h("div", { className: "cx-note" }, `${keep.filter(Boolean).length} of ${data.vocab.length} tokens can be drawn; ` +
        `the ${data.bars} most likely are shown, greyed where filtered out.`),
      bars);
  }
  timed(el, draw);
}

// ---- positions: one position's dot product with every other ----

function positionsView(data, el) {
  const state = { table: 0, position: Math.floor(data.tables[0].similarity.length / 2) };
  const controls = h("div", { className: "cx-controls" });
  const body = h("div");
  el.append(controls, body);
  controls.append(
    select("table ", data.tables.map((t, i) => [i, t.label]), 0, (v) => { state.table = Number(v); timed(el, draw); }),
    slider("position ", 0, data.tables[0].similarity.length - 1, 1, state.position,
      (v) => { state.position = v; timed(el, draw); }, "position"));

  function draw() {
    const row = data.tables[state.table].similarity[state.position];
    const scale = Math.max(...row.map(Math.abs), 1e-9);
    const bars = h("div", { className: "cx-tokens" }, ...row.map((v, n) => {
      const cell = h("span", { className: "cx-token" + (n === state.position ? " cx-active" : ""),
        "data-value": v.toFixed(4), title: `position ${n}: ${v.toFixed(3)}` }, String(n));
      cell.style.background = v >= 0 ? blue(v / scale) : `rgba(214, 39, 40, ${(-v / scale).toFixed(3)})`;
      return cell;
    }));
    body.replaceChildren(h("div", { className: "cx-note" }, data.note || ""), bars);
  }
  timed(el, draw);
}

const VIEWS = { attention: attentionView, generation: generationView, positions: positionsView };

function render({ model, el }) {
  const root = h("div", { className: "cx-root" }, h("style", {}, STYLE));
  el.append(root);
  const draw = () => {
    const data = model.get("data");
    root.replaceChildren(root.firstChild);
    const view = h("div", { "data-view": data.kind });
    root.append(view);
    VIEWS[data.kind](data, view, model.get("live") ? model : null);
  };
  model.on("change:data", draw);
  draw();
}

// The static page's stand-in for a widget's model: the same render() on data that cannot change.
export function renderStatic(el, data) {
  render({ model: { get: (key) => (key === "data" ? data : false), on() {}, set() {}, save_changes() {} }, el });
}

export default { render };
