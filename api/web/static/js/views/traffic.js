// Traffic: the traffic matrix (POST /v1/traffic-matrices, json) as a canvas heatmap.
import { html, useEffect, useMemo, useRef, useState } from "../lib.js";
import { bytes, gbps, num } from "../format.js";
import { ErrorBox, Busy, color, label } from "../common.js";

const SIDE = 560; // CSS pixels of the heatmap

/** Node of an index at this level (a node-level matrix is indexed by node already). */
const nodeOf = (m, i) => (m.level === "node" ? i : Math.floor(i / m.gpus_per_node));

/** cells: Map "src,dst" -> {total, byKind}; values in bytes or GB/s (network view). */
function aggregate(m, enabled, network) {
  const cells = new Map();
  for (const r of m.rows) {
    if (!enabled[r.kind]) continue;
    if (network && nodeOf(m, r.src) === nodeOf(m, r.dst)) continue;
    const v = network ? r.bytes / m.iteration_time_s / 1e9 : r.bytes;
    const key = `${r.src},${r.dst}`;
    const cell = cells.get(key) || { src: r.src, dst: r.dst, total: 0, byKind: {} };
    cell.total += v;
    cell.byKind[r.kind] = (cell.byKind[r.kind] || 0) + v;
    cells.set(key, cell);
  }
  return cells;
}

function Heatmap({ m, cells, network, onHover }) {
  const ref = useRef(null);
  const size = m.size;
  const cell = Math.max(SIDE / size, 0.5);
  useEffect(() => {
    const canvas = ref.current;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(SIDE * dpr);
    canvas.height = Math.round(SIDE * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.fillStyle = "#fafafa";
    g.fillRect(0, 0, SIDE, SIDE);
    const values = [...cells.values()].map((c) => c.total).filter((v) => v > 0);
    const lo = Math.log(Math.min(...values));
    const hi = Math.log(Math.max(...values));
    for (const c of cells.values()) {
      if (!(c.total > 0)) continue;
      const [kind] = Object.entries(c.byKind).sort((a, b) => b[1] - a[1])[0];
      g.globalAlpha = hi > lo ? 0.3 + (0.7 * (Math.log(c.total) - lo)) / (hi - lo) : 1;
      g.fillStyle = color(kind);
      g.fillRect(c.dst * cell, c.src * cell, Math.max(cell, 1), Math.max(cell, 1));
    }
    g.globalAlpha = 1;
    if (cell >= 56) {
      // big cells carry their figure
      g.fillStyle = "#111";
      g.font = "12px system-ui, sans-serif";
      g.textAlign = "center";
      g.textBaseline = "middle";
      for (const c of cells.values()) {
        if (c.total > 0) g.fillText(network ? gbps(c.total) : bytes(c.total), (c.dst + 0.5) * cell, (c.src + 0.5) * cell);
      }
    }
    // node boundaries
    const per = m.level === "node" ? 1 : m.gpus_per_node;
    const nodes = Math.ceil(size / per);
    if (nodes > 1 && (per * cell >= 3)) {
      g.strokeStyle = "rgba(0,0,0,0.35)";
      g.lineWidth = 1;
      g.beginPath();
      for (let k = 1; k < nodes; k++) {
        const p = Math.round(k * per * cell) + 0.5;
        g.moveTo(p, 0); g.lineTo(p, SIDE); g.moveTo(0, p); g.lineTo(SIDE, p);
      }
      g.stroke();
    }
  }, [m, cells, network]);
  const hover = (e) => {
    const box = ref.current.getBoundingClientRect();
    const dst = Math.floor(((e.clientX - box.left) / box.width) * size);
    const src = Math.floor(((e.clientY - box.top) / box.height) * size);
    if (src >= 0 && dst >= 0 && src < size && dst < size) onHover({ src, dst, cell: cells.get(`${src},${dst}`) });
  };
  return html`<div class="heatmap-wrap">
    <div class="axis-x">destination ${m.level === "node" ? "node" : "GPU"} →</div>
    <div class="heatmap-row">
      <div class="axis-y">source ${m.level === "node" ? "node" : "GPU"} ↓</div>
      <canvas ref=${ref} class="heatmap" data-testid="heatmap" style=${{ width: `${SIDE}px`, height: `${SIDE}px` }}
        onMouseMove=${hover} onMouseLeave=${() => onHover(null)} />
    </div>
  </div>`;
}

function HoverInfo({ m, hovered, network }) {
  if (!hovered) return html`<p class="muted small hover-info">Hover a cell: source row, destination column.</p>`;
  const { src, dst, cell } = hovered;
  const unit = m.level === "node" ? "node" : "GPU";
  const fmt = network ? gbps : bytes;
  const where = m.level === "gpu" ? ` (node ${nodeOf(m, src)} → node ${nodeOf(m, dst)})` : "";
  return html`<p class="small hover-info" data-testid="hover-info">${unit} ${src} → ${unit} ${dst}${where}:
    ${cell ? Object.entries(cell.byKind).map(([k, v]) => `${label(k)} ${fmt(v)}`).join(", ") : "no traffic"}${network ? "" : " per iteration"}</p>`;
}

function NodeTable({ m, cells }) {
  const egress = new Map();
  const ingress = new Map();
  for (const c of cells.values()) {
    const a = nodeOf(m, c.src);
    const b = nodeOf(m, c.dst);
    egress.set(a, (egress.get(a) || 0) + c.total);
    ingress.set(b, (ingress.get(b) || 0) + c.total);
  }
  const nodes = [...new Set([...egress.keys(), ...ingress.keys()])].sort((a, b) => a - b);
  if (!nodes.length) return html`<p class="muted">No inter-node traffic in this layout.</p>`;
  const shown = nodes.slice(0, 64);
  return html`<table class="data compact" data-testid="node-table">
    <thead><tr><th>node</th><th class="num">sends (GB/s)</th><th class="num">receives (GB/s)</th></tr></thead>
    <tbody>${shown.map((k) => html`<tr><td>${k}</td><td class="num">${num(egress.get(k) || 0, 2)}</td><td class="num">${num(ingress.get(k) || 0, 2)}</td></tr>`)}</tbody>
    ${nodes.length > shown.length ? html`<caption class="muted small">first ${shown.length} of ${nodes.length} nodes</caption>` : null}
  </table>`;
}

export function TrafficView({ state, level, setLevel }) {
  const { result: m, error, busy } = state;
  const [network, setNetwork] = useState(false);
  const [off, setOff] = useState({});
  const [hovered, setHovered] = useState(null);
  const kinds = m ? Object.keys(m.totals.by_kind).filter((k) => m.totals.by_kind[k] > 0) : [];
  const enabled = Object.fromEntries(kinds.map((k) => [k, !off[k]]));
  const cells = useMemo(() => (m ? aggregate(m, enabled, network) : new Map()), [m, network, JSON.stringify(off)]);
  return html`<div data-testid="traffic-view">
    <div class="toolbar">
      <label>level <select value=${level} data-testid="traffic-level" onChange=${(e) => setLevel(e.currentTarget.value)}>
        <option value="auto" selected=${level === "auto"}>auto (GPUs up to 128, else nodes)</option>
        <option value="node" selected=${level === "node"}>node × node</option>
        <option value="gpu" selected=${level === "gpu"}>GPU × GPU</option>
      </select></label>
      <label class="check"><input type="checkbox" data-testid="network-only" checked=${network}
        onChange=${(e) => setNetwork(e.currentTarget.checked)} /> network only (between nodes, GB/s)</label>
    </div>
    <${Busy} busy=${busy}>Building the matrix…<//>
    <${ErrorBox} error=${error} />
    ${m
      ? html`
        <p class="muted small">${num(m.gpus)} GPUs, ${m.gpus_per_node} per node; ${m.algorithm} algorithm; colour = the largest kind in the cell, darker = more bytes (log scale). ${network ? `Values: bytes per iteration ÷ iteration time (${m.iteration_time_s.toFixed(3)} s).` : "Values: bytes per iteration."}</p>
        <div class="traffic">
          <${Heatmap} m=${m} cells=${cells} network=${network} onHover=${setHovered} />
          <div class="traffic-side">
            <h4>Kinds <small class="muted">(click to hide)</small></h4>
            <ul class="toggles" data-testid="kinds">${kinds.map((k) => html`<li>
              <label class="check"><input type="checkbox" checked=${!off[k]} data-kind=${k}
                onChange=${(e) => setOff({ ...off, [k]: !e.currentTarget.checked })} />
              <span class="swatch" style=${{ background: color(k) }}></span>${label(k)}
              <span class="muted small">${bytes(m.totals.by_kind[k])}/iter.</span></label></li>`)}</ul>
            <p class="small">Total ${bytes(m.totals.bytes)} per iteration over ${num(m.totals.entries)} entries.</p>
            <${HoverInfo} m=${m} hovered=${hovered} network=${network} />
            ${network ? html`<h4>Per node</h4><${NodeTable} m=${m} cells=${cells} />` : null}
          </div>
        </div>`
      : null}
  </div>`;
}
