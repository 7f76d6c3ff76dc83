// Plan: GPU count -> ranked layouts (POST /v1/plans), near-ties grouped, two side by side.
import { html, useEffect, useState } from "../lib.js";
import { api } from "../api.js";
import { bytes, num, seconds, signedSeconds } from "../format.js";
import { ErrorBox, Busy, Notes, color, label } from "../common.js";
import { gpuCount } from "../scenario.js";

export const TIE = 0.03; // layouts within 3 % of a group's fastest are near-ties

const PRECISIONS = ["fp32", "tf32", "fp16", "bf16", "fp8"];
const layoutText = (l) =>
  `p${l.pipeline} t${l.tensor} d${l.data}${l.context_parallel > 1 ? ` cp${l.context_parallel}` : ""}${l.expert_parallel > 1 ? ` ep${l.expert_parallel}` : ""}${l.expert_tensor_parallel === 1 ? " etp1" : ""}${l.virtual_stages > 1 ? ` v${l.virtual_stages}` : ""}`;
const detailText = (l) =>
  `mbs ${l.micro_batch_size}, recompute ${l.recompute}${l.recompute_num_layers != null ? ` (${l.recompute_num_layers} layers per chunk)` : ""}, ZeRO ${l.zero_stage}${l.sequence_parallel ? ", SP" : ""}${l.precision ? `, ${l.precision}` : ""}`;

let accepted = null;
/** The fields POST /v1/plans accepts on this server (its OpenAPI schema): a newer server
 * takes the headroom, the node rule and precisions itself; an older one gets max_tensor and
 * the headroom is applied here. Requests forbid unknown fields, so only these are sent. */
export function planFields() {
  accepted ||= api("/openapi.json")
    .then((doc) => new Set(Object.keys(doc.components.schemas.PlanRequest?.properties || {})))
    .catch(() => new Set());
  return accepted;
}

/** Groups of entries: the server's (`groups` or per-entry `group`) if it gives them, else 3 %. */
export function groupsOf(plan, entries) {
  if (entries.some((e) => e.group !== undefined && e.group !== null)) {
    const by = new Map();
    for (const e of entries) by.set(e.group, [...(by.get(e.group) || []), e]);
    return [...by.values()];
  }
  if (Array.isArray(plan.groups) && plan.groups.length) {
    const byRank = new Map(entries.map((e) => [e.rank, e]));
    const groups = plan.groups
      .map((g) => (Array.isArray(g) ? g : g.ranks || g.members || []).map((r) => byRank.get(r)).filter(Boolean))
      .filter((g) => g.length);
    if (groups.length) return groups;
  }
  const groups = [];
  for (const e of entries) {
    const last = groups[groups.length - 1];
    if (last && e.iteration_time_s <= last[0].iteration_time_s * (1 + TIE)) last.push(e);
    else groups.push([e]);
  }
  return groups;
}

/** "+1.2 %" or "−0.5 %": a time against a reference. */
function relative(time, reference) {
  const d = (100 * time) / reference - 100;
  return `${d < 0 ? "−" : "+"}${Math.abs(d).toFixed(1)} %`;
}

function groupText(g) {
  const times = g.map((e) => e.iteration_time_s);
  return `${g.length} near-ties, ${seconds(Math.min(...times))} to ${seconds(Math.max(...times))}`;
}

function Compare({ a, b }) {
  const terms = [...new Set([...Object.keys(a.breakdown_s), ...Object.keys(b.breakdown_s)])].filter(
    (k) => a.breakdown_s[k] || b.breakdown_s[k],
  );
  const row = (name, x, y, fmt, diff, cls = "") => html`<tr class=${cls}>
    <td>${name}</td><td class="num">${fmt(x)}</td><td class="num">${fmt(y)}</td>
    <td class=${`num ${y - x > 0 ? "worse" : y - x < 0 ? "better" : ""}`}>${diff(y - x)}</td></tr>`;
  const signedBytes = (d) => (d === 0 ? "±0" : `${d > 0 ? "+" : "−"}${bytes(Math.abs(d))}`);
  return html`<section class="compare" data-testid="compare">
    <h3>Side by side</h3>
    <table class="data">
      <thead><tr><th></th>
        <th class="num">A: #${a.rank} ${layoutText(a.layout)}<br /><small>${detailText(a.layout)}</small></th>
        <th class="num">B: #${b.rank} ${layoutText(b.layout)}<br /><small>${detailText(b.layout)}</small></th>
        <th class="num">B − A</th></tr></thead>
      <tbody>
        ${terms.map((k) => row(html`<span class="swatch" style=${{ background: color(k) }}></span>${label(k)}`, a.breakdown_s[k] || 0, b.breakdown_s[k] || 0, seconds, signedSeconds))}
        ${row(html`<strong>iteration time</strong>`, a.iteration_time_s, b.iteration_time_s, seconds, signedSeconds, "total")}
        ${row("memory per GPU", a.memory_bytes, b.memory_bytes, bytes, signedBytes)}
        ${row("micro-batches", a.micro_batches, b.micro_batches, (x) => num(x), (d) => (d === 0 ? "±0" : (d > 0 ? "+" : "−") + num(Math.abs(d))))}
      </tbody>
    </table>
  </section>`;
}

export function PlanView({ scenario, profile, state, run, onLoad, active }) {
  const perNode = profile ? profile.gpus_per_node : 8;
  const [form, setForm] = useState({
    gpus: gpuCount(scenario) || 64,
    top_k: 20,
    headroom: 10,
    tensorInNode: true,
    fitsOnly: true,
    recompute: { none: true, selective: true, full: true },
    blocks: "",
    precision: {},
  });
  const [fields, setFields] = useState(null);
  const [clientHeadroom, setClientHeadroom] = useState(true);
  const [picked, setPicked] = useState([]);
  useEffect(() => { if (active && !fields) planFields().then(setFields); }, [active]);
  const set = (patch) => setForm({ ...form, ...patch });
  const submit = async (e) => {
    e.preventDefault();
    setPicked([]);
    const known = await planFields();
    const recompute = Object.keys(form.recompute).filter((k) => form.recompute[k]);
    const precision = PRECISIONS.filter((k) => form.precision[k]);
    const extra = { gpus: Number(form.gpus), top_k: Number(form.top_k), drop_infeasible: form.fitsOnly };
    if (recompute.length) extra.recompute = recompute;
    // block recompute: layers per chunk to sweep beside full ("2 4 8"; only with full ticked)
    const blocks = [...new Set(form.blocks.split(/[\s,]+/).filter(Boolean).map(Number))];
    if (blocks.length && form.recompute.full && known.has("recompute_num_layers")) extra.recompute_num_layers = blocks;
    if (form.tensorInNode) {
      if (known.has("tensor_within_node")) extra.tensor_within_node = true;
      else extra.max_tensor = perNode;
    }
    if (known.has("memory_headroom")) extra.memory_headroom = Number(form.headroom) / 100;
    if (known.has("precision") && precision.length) extra.precision = [...new Set([scenario.precision, ...precision])];
    setClientHeadroom(!known.has("memory_headroom"));
    run(extra);
  };
  const plan = state.result;
  const capacity = plan?.cluster?.gpu_memory_bytes;
  const headroom = Number(form.headroom) / 100;
  const entries = plan
    ? plan.layouts.filter(
        (e) => !clientHeadroom || !capacity || !(headroom > 0) || e.memory_bytes <= capacity * (1 - headroom),
      )
    : [];
  const groups = plan ? groupsOf(plan, entries) : [];
  const toggle = (rank) =>
    setPicked(picked.includes(rank) ? picked.filter((r) => r !== rank) : [...picked, rank].slice(-2));
  const chosen = picked.map((r) => entries.find((e) => e.rank === r)).filter(Boolean);
  return html`<div data-testid="plan-view">
    <form class="toolbar plan-form" onSubmit=${submit}>
      <label>GPUs <input type="number" min="1" step="1" name="gpus" value=${form.gpus} onInput=${(e) => set({ gpus: e.currentTarget.value })} /></label>
      <label>show best <input type="number" min="1" max="200" step="1" name="top_k" value=${form.top_k} onInput=${(e) => set({ top_k: e.currentTarget.value })} /></label>
      <label title="hide layouts using more than (100 − this) % of GPU memory">memory headroom ≥ <input type="number" min="0" max="90" step="5" name="headroom" value=${form.headroom} onInput=${(e) => set({ headroom: e.currentTarget.value })} /> %</label>
      <label class="check"><input type="checkbox" checked=${form.tensorInNode} onChange=${(e) => set({ tensorInNode: e.currentTarget.checked })} /> tensor parallel within a node (${perNode} GPUs)</label>
      <label class="check"><input type="checkbox" checked=${form.fitsOnly} onChange=${(e) => set({ fitsOnly: e.currentTarget.checked })} /> only layouts that fit</label>
      <span class="group-label">recompute:
        ${["none", "selective", "full"].map((k) => html`<label class="check"><input type="checkbox" checked=${form.recompute[k]}
          onChange=${(e) => set({ recompute: { ...form.recompute, [k]: e.currentTarget.checked } })} /> ${k}</label>`)}
      </span>
      ${fields && fields.has("recompute_num_layers") && form.recompute.full
        ? html`<label title="Megatron's block recompute, swept beside full: the first N layers of each pipeline chunk replayed, the others keeping their activations (whole numbers, e.g. 2 4 8)">block recompute, layers per chunk
            <input type="text" name="blocks" inputmode="numeric" placeholder="e.g. 2 4 8" size="8" value=${form.blocks} onInput=${(e) => set({ blocks: e.currentTarget.value })} /></label>`
        : null}
      ${fields && fields.has("precision")
        ? html`<span class="group-label" title="precisions to sweep besides the scenario's">also try:
            ${PRECISIONS.filter((k) => k !== scenario.precision).map((k) => html`<label class="check"><input type="checkbox" checked=${!!form.precision[k]}
              onChange=${(e) => set({ precision: { ...form.precision, [k]: e.currentTarget.checked } })} /> ${k}</label>`)}
          </span>`
        : null}
      <button type="submit" class="primary" data-testid="plan-submit">Rank layouts</button>
    </form>
    <p class="muted small">Model, batch, precision, framework and cluster come from the scenario on the left (${scenario.preset === "__custom__" ? "custom shape" : scenario.preset}, global batch ${scenario.global_batch_size}, ${scenario.precision}, ${scenario.profile}).</p>
    <${Busy} busy=${state.busy}>Sweeping layouts…<//>
    <${ErrorBox} error=${state.error} />
    ${plan
      ? html`
        <p class="small">${num(plan.evaluated)} layouts evaluated${plan.feasible !== null ? `, ${num(plan.feasible)} fit in memory` : ""}; ${entries.length} shown in ${groups.length} group${groups.length === 1 ? "" : "s"} of near-ties (within ${TIE * 100} % of the group's fastest). Tick two to compare them.</p>
        ${chosen.length === 2 ? html`<${Compare} a=${chosen[0]} b=${chosen[1]} />` : null}
        <table class="data plan" data-testid="plan-table">
          <thead><tr><th>compare</th><th>#</th><th>layout</th><th>details</th><th class="num">iteration time</th>
            <th class="num" title="iteration time against the top row">vs top</th><th class="num">memory / GPU</th><th></th></tr></thead>
          ${groups.map((g, gi) => html`<tbody class=${`group ${gi % 2 ? "odd" : ""}`}>
            ${g.length > 1 ? html`<tr class="group-head"><td colspan="8">${groupText(g)}</td></tr>` : null}
            ${g.map((e) => html`<tr data-testid="plan-row" data-rank=${e.rank}>
              <td><input type="checkbox" aria-label=${`compare layout ${e.rank}`} data-testid="compare-pick" checked=${picked.includes(e.rank)} onChange=${() => toggle(e.rank)} /></td>
              <td>${e.rank}</td>
              <td><strong>${layoutText(e.layout)}</strong></td>
              <td class="small">${detailText(e.layout)}</td>
              <td class="num">${seconds(e.iteration_time_s)}</td>
              <td class="num muted">${e === entries[0] ? "top" : relative(e.iteration_time_s, entries[0].iteration_time_s)}</td>
              <td class="num">${bytes(e.memory_bytes)}${e.fits === false ? html` <span class="badge bad">too big</span>` : ""}</td>
              <td><button type="button" data-testid="load-layout" onClick=${() => onLoad(e.layout)}>Estimate this →</button></td>
            </tr>`)}
          </tbody>`)}
        </table>
        <${Notes} warnings=${plan.warnings} assumptions=${plan.assumptions} />`
      : !state.busy && !state.error ? html`<p class="muted">Give a GPU count and press “Rank layouts”: every valid (p, t, d) layout is estimated and the fastest are listed; “Estimate this” opens one in the Estimate tab.</p>` : null}
  </div>`;
}
