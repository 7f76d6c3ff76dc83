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

function ticks(max) {
  if (!(max > 0)) return [0];
  const raw = max / 8;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw);
  const out = [];
  for (let t = 0; t <= max + 1e-12; t += step) out.push(t);
  return out;
}

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
  // a tick after the gap is labelled with the real time it stands for
  const real = (s) => (gap !== null && s > gap ? s + t.elided_s : s);
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
      ${ticks(span).map((s) => html`<g class="tick">
        <line x1=${x(s)} x2=${x(s)} y1=${stages * LANE} y2=${stages * LANE + 5} />
        <text x=${x(s)} y=${stages * LANE + 18} text-anchor="middle">${seconds(real(s))}</text></g>`)}
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
          <div class="figure"><div class="figure-label">bubble</div><div class="figure-value">${seconds(t.bubble_s)} (${pct(t.bubble_ratio)})</div></div>
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
