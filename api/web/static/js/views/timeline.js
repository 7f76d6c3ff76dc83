// Pipeline timeline: POST /v1/timelines drawn as one SVG lane per pipeline stage.
import { html } from "../lib.js";
import { num, pct, seconds } from "../format.js";
import { ErrorBox, Busy, Notes } from "../common.js";

export const KIND_COLORS = {
  forward: "#4e79a7",
  backward: "#a0cbe8",
  recompute: "#8cd17d",
  tp_comm: "#f28e2b",
  pp_comm: "#e15759",
  dp_comm: "#76b7b2",
  optimizer: "#9c755f",
  idle: "#eeeeee",
};
const WIDTH = 1000;
const GUTTER = 76;
const LANE = 28;
const AXIS = 28;

/** A round step for about eight ticks over `range` seconds. */
function tickStep(range) {
  const raw = range / 8;
  const mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((k) => k * mag).find((step) => step >= raw);
}

/** Multiples of `step` in [from, to] (with a little slack for rounding). */
function multiples(step, from, to) {
  const out = [];
  for (let k = Math.ceil(from / step - 1e-9); k * step <= to + step * 1e-9; k++) out.push(k * step);
  return out;
}

/** Seconds for an axis: no trailing zeros ("2 s", "150 ms"). */
const tickLabel = (s) => seconds(s).replace(/(\.\d*?)0+ /, "$1 ").replace(/\. /, " ");

/**
 * Drawn time of an event: a truncated schedule elides steady-state micro-batches, and events
 * after the gap (`after_gap`) are drawn `elided_s` earlier to close it (POST /v1/timelines).
 */
const drawn = (t, e, s) => (e.after_gap && t.elided_s ? s - t.elided_s : s);

export function Timeline({ data: t }) {
  const ends = t.events.map((e) => drawn(t, e, e.end_s));
  const span = Math.max(...ends, 0) || t.makespan_s || 1;
  const x = (s) => GUTTER + ((WIDTH - GUTTER - 28) * s) / span;
  const stages = t.pipeline_stages;
  const height = stages * LANE + AXIS;
  const kinds = [...new Set(t.events.map((e) => e.kind))];
  const after = t.events.filter((e) => e.after_gap);
  const gap = after.length && t.elided_s ? Math.min(...after.map((e) => drawn(t, e, e.start_s))) : null;
  // ticks: round drawn times before the gap, round real times after it (drawn elided_s earlier)
  const step = span > 0 ? tickStep(span) : 1;
  const axis =
    gap === null
      ? multiples(step, 0, span).map((s) => [s, s])
      : [
          ...multiples(step, 0, gap - step / 2).map((s) => [s, s]),
          ...multiples(step, gap + t.elided_s + step / 2, span + t.elided_s).map((r) => [r - t.elided_s, r]),
        ];
  return html`
    <svg class="timeline" data-testid="timeline" viewBox=${`0 0 ${WIDTH} ${height}`} role="img"
      aria-label=${`pipeline timeline of ${stages} stages`}>
      ${Array.from({ length: stages }, (_, i) => html`
        <text x=${GUTTER - 8} y=${i * LANE + LANE / 2 + 4} text-anchor="end" class="lane-label">stage ${i}</text>
        <rect x=${GUTTER} y=${i * LANE + 2} width=${WIDTH - GUTTER - 28} height=${LANE - 4} class="lane" />`)}
      ${t.events.map((e) => {
        const x0 = x(drawn(t, e, e.start_s));
        const w = Math.max(x(drawn(t, e, e.end_s)) - x0, 0.5);
        const y = e.stage * LANE + 3;
        const mb = e.microbatch === null || e.microbatch === undefined ? "" : String(e.microbatch);
        const chunk = e.chunk !== null && e.chunk !== undefined && t.virtual_stages > 1 ? ` · chunk ${e.chunk}` : "";
        return html`<g class=${`ev ${e.kind}`}>
          <rect x=${x0} y=${y} width=${w} height=${LANE - 6} fill=${KIND_COLORS[e.kind] || "#999"}>
            <title>${`stage ${e.stage} · ${e.kind.replace("_", " ")}${mb ? ` · micro-batch ${mb}` : ""}${chunk}\n${seconds(e.start_s)} → ${seconds(e.end_s)} (${seconds(e.end_s - e.start_s)})`}</title>
          </rect>
          ${mb && w > 8 + 6 * mb.length ? html`<text x=${x0 + w / 2} y=${y + LANE / 2 + 1} text-anchor="middle" class="mb">${mb}</text>` : null}
        </g>`;
      })}
      ${gap !== null
        ? html`<g class="gap" data-testid="timeline-gap"><line x1=${x(gap)} x2=${x(gap)} y1="0" y2=${stages * LANE} />
            <title>${`${t.elided_microbatches} micro-batches elided here (${seconds(t.elided_s)} of steady state)`}</title></g>`
        : null}
      ${axis.map(([s, r]) => html`<g class="tick">
        <line x1=${x(s)} x2=${x(s)} y1=${stages * LANE} y2=${stages * LANE + 5} />
        <text x=${x(s)} y=${stages * LANE + 18} text-anchor="middle">${tickLabel(r)}</text></g>`)}
    </svg>
    <ul class="inline-legend">${kinds.map((k) => html`<li><span class="swatch" style=${{ background: KIND_COLORS[k] || "#999" }}></span>${k.replace("_", " ")}</li>`)}</ul>
  `;
}

export function TimelineView({ state }) {
  const { result: t, error, busy } = state;
  const missing = error && error.status === 404 && /^no route/.test(error.problem?.detail || "");
  return html`<div data-testid="timeline-view">
    <${Busy} busy=${busy}>Scheduling the pipeline…<//>
    ${missing
      ? html`<div class="error">This server has no POST /v1/timelines yet (HTTP 404); update commest.</div>`
      : html`<${ErrorBox} error=${error} />`}
    ${t
      ? html`
        <section class="figures">
          <div class="figure"><div class="figure-label">schedule</div><div class="figure-value">${t.schedule}</div></div>
          <div class="figure"><div class="figure-label">stages · micro-batches · chunks</div><div class="figure-value">${t.pipeline_stages} · ${t.microbatches} · ${t.virtual_stages}</div></div>
          <div class="figure"><div class="figure-label">makespan</div><div class="figure-value" data-testid="makespan">${seconds(t.makespan_s)}</div></div>
          <div class="figure"><div class="figure-label">bubble</div><div class="figure-value">${seconds(t.bubble_s)} <small>${pct(t.bubble_ratio)} of the iteration</small></div></div>
          <div class="figure"><div class="figure-label">iteration time</div><div class="figure-value">${seconds(t.iteration_time_s)}</div></div>
        </section>
        ${t.truncated
          ? html`<p class="warn-inline">${t.elided_microbatches ? `${num(t.elided_microbatches)} steady-state micro-batches` : "Part of the schedule"} ${t.elided_s ? `(${seconds(t.elided_s)})` : ""} elided at the dashed line; times after it are real times.</p>`
          : null}
        <p class="muted small">Time runs left to right; each lane is a pipeline stage; numbers are micro-batches. Hover a block for its times.</p>
        <div class="scroll"><${Timeline} data=${t} /></div>
        <${Notes} warnings=${t.warnings} assumptions=${t.assumptions} />`
      : !busy && !error ? html`<p class="muted">Press “Draw timeline” to schedule this scenario.</p>` : null}
  </div>`;
}
