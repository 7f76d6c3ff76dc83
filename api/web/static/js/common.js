// Small shared pieces: colours per term and kind, error boxes, stacked bars.
import { html } from "./lib.js";
import { describe } from "./api.js";

// Iteration-time terms (EstimateResponse.breakdown_s) and traffic kinds share their colours.
export const TERM_COLORS = {
  compute: "#4e79a7",
  tp: "#f28e2b",
  cp: "#edc948",
  pp: "#e15759",
  dp: "#76b7b2",
  bubble: "#bab0ac",
  embedding_sync: "#59a14f",
  expert: "#b07aa1",
  optimizer: "#9c755f",
  host: "#ff9da7",
};
export const TERM_LABELS = {
  compute: "compute",
  tp: "tensor-parallel comm.",
  cp: "context-parallel comm.",
  pp: "pipeline comm.",
  dp: "data-parallel comm.",
  bubble: "pipeline bubble",
  embedding_sync: "embedding sync",
  expert: "expert (MoE) comm.",
  optimizer: "optimizer step",
  host: "waiting on the host (eager MoE layers)",
};
export const color = (key) => TERM_COLORS[key] || "#888";
export const label = (key) => TERM_LABELS[key] || key.replaceAll("_", " ");

export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error" role="alert" data-testid="error">${describe(error)}</div>`;
}

export function Busy({ busy, children }) {
  return busy ? html`<p class="busy" aria-live="polite">${children || "Working…"}</p>` : null;
}

/**
 * A horizontal stacked bar of parts against a scale (the larger of their sum and `limit`).
 * parts: [{key, label, value, color}]; `limit` draws a marker (e.g. memory capacity).
 */
export function StackedBar({ parts, limit, format, testid, limitLabel }) {
  const total = parts.reduce((s, p) => s + p.value, 0);
  const scale = Math.max(total, limit || 0) || 1;
  return html`
    <div class="stacked" data-testid=${testid}>
      <div class="bar">
        ${parts
          .filter((p) => p.value > 0)
          .map(
            (p) => html`<div
              class="seg"
              style=${{ width: `${(100 * p.value) / scale}%`, background: p.color }}
              title=${`${p.label}: ${format(p.value)} (${((100 * p.value) / total).toFixed(1)} %)`}
            ></div>`,
          )}
        ${limit
          ? html`<div class="limit" style=${{ left: `${(100 * limit) / scale}%` }} title=${limitLabel}></div>`
          : null}
      </div>
      <table class="legend">
        <tbody>
          ${parts.map(
            (p) => html`<tr class=${p.value > 0 ? "" : "zero"}>
              <td><span class="swatch" style=${{ background: p.color }}></span>${p.label}</td>
              <td class="num">${format(p.value)}</td>
              <td class="num muted">${total ? ((100 * p.value) / total).toFixed(1) : "0.0"} %</td>
            </tr>`,
          )}
        </tbody>
      </table>
    </div>
  `;
}

export function Figure({ label: text, value, hint, testid, raw, note }) {
  return html`<div class="figure" title=${hint || ""}>
    <div class="figure-label">${text}</div>
    <div class="figure-value" data-testid=${testid} data-raw=${raw}>${value}</div>
    ${note ? html`<div class="figure-note">${note}</div>` : null}
  </div>`;
}

export function Notes({ warnings, assumptions }) {
  return html`
    ${warnings && warnings.length
      ? html`<details class="warnings" open=${warnings.length <= 3}>
          <summary>${warnings.length} warning${warnings.length > 1 ? "s" : ""}</summary>
          <ul>${warnings.map((w) => html`<li>${w}</li>`)}</ul>
        </details>`
      : null}
    ${assumptions && assumptions.length
      ? html`<details class="assumptions">
          <summary>${assumptions.length} assumptions behind these figures</summary>
          <ul>${assumptions.map((a) => html`<li>${a}</li>`)}</ul>
        </details>`
      : null}
  `;
}
