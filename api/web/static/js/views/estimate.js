// Estimate: iteration time and its terms, ratios, throughput, memory, collectives.
import { html } from "../lib.js";
import { bytes, count, gbps, num, pct, seconds, sig } from "../format.js";
import { ErrorBox, Busy, Figure, Notes, StackedBar, color, label } from "../common.js";

const MEMORY_PARTS = [
  ["weights_bytes", "weights", "#4e79a7"],
  ["gradients_bytes", "gradients", "#f28e2b"],
  ["optimizer_bytes", "optimizer state", "#76b7b2"],
  ["activations_bytes", "activations", "#e15759"],
];

// A flex MoE dispatch's two legs run at once; the term is charged the slower one.
const SCOPES = {
  across_nodes: ["RDMA leg", "a token crosses to each remote node once, to the rank at the same position (priced on the whole group's placement; its off-node share is what crosses)"],
  within_node: ["NVLink leg", "a token reaches each rank of the node holding one of its experts once"],
};

function Collectives({ rows }) {
  if (!rows.length) return html`<p class="muted">No collectives in this layout.</p>`;
  return html`<div class="scroll"><table class="data" data-testid="collectives">
    <thead><tr>
      <th>term</th><th>collective</th><th class="num">ranks / nodes</th><th class="num">message</th>
      <th class="num">calls / iter.</th><th class="num">bus bandwidth</th><th class="num">time / call</th>
      <th class="num">link time / iter.</th><th>bandwidth from</th>
    </tr></thead>
    <tbody>${rows.map((c) => html`<tr>
      <td><span class="swatch" style=${{ background: color(c.term) }}></span>${label(c.term)}${c.kind !== c.term ? html`<small class="muted"> (${c.kind} group)</small>` : null}</td>
      <td>${c.op.replaceAll("_", "-")}${SCOPES[c.scope] ? html`<small class="muted" title=${SCOPES[c.scope][1]} data-testid="scope"> (${SCOPES[c.scope][0]})</small>` : null}</td>
      <td class="num">${c.ranks} / ${c.nodes}</td>
      <td class="num">${bytes(c.size_bytes)}</td>
      <td class="num">${num(c.calls_per_iteration)}</td>
      <td class="num">${gbps(c.busbw_gbps)}</td>
      <td class="num">${seconds(c.time_per_call_s)}</td>
      <td class="num">${seconds(c.link_time_s)}</td>
      <td class="provenance">
        <span class=${`badge ${c.method}`}>${c.method}</span>
        ${c.quality.weak ? html`<span class="badge weak" title=${c.quality.advice || ""}>weak</span>` : html`<span class="badge good">good</span>`}
        ${c.quality.derived_placement ? html`<span class="badge derived" title="placement derived from a run at another scale">derived placement</span>` : null}
        ${c.quality.derived_op ? html`<span class="badge derived" title=${`${c.quality.derived_op} stands in`}>via ${c.quality.derived_op}</span>` : null}
        <small class="muted" title="distance in binary orders of magnitude from the nearest measured message size"> ${sig(c.quality.distance_octaves, 2)} octaves off</small>
        <details><summary>source</summary><p class="small">${c.source}</p>
          ${c.quality.advice ? html`<p class="small advice">To improve: ${c.quality.advice}</p>` : null}</details>
      </td>
    </tr>`)}</tbody>
  </table></div>`;
}

// How commest did on the published runs of this very model under this kind of trainer; a
// click opens the Accuracy tab on them.
function SameModel({ same, kind, showRuns }) {
  const runs = same.runs === 1 ? "1 published run" : `${num(same.runs)} published runs`;
  const command = `commest validate --model ${same.model.split(" / ")[0]} --kind ${kind}`;
  const open = (e) => { e.preventDefault(); showRuns?.(same.model, kind); };
  return html`<a href="#accuracy" data-testid="validated-same-model" class=${same.misses_target ? "advice" : ""} onClick=${open}
    title=${`published ${kind} runs of ${same.model}, predicted out of sample: ${num(same.min_error_pct, 1)} % to ${num(same.max_error_pct, 1)} % (${command}); click to list them`}>
    this model: ${num(same.mean_abs_error_pct, 1)} % mean error on ${runs}</a>`;
}

export function EstimateResult({ result: r, showRuns }) {
  const terms = Object.entries(r.breakdown_s).map(([k, v]) => ({ key: k, label: label(k), value: v, color: color(k) }));
  const m = r.memory;
  const parts = MEMORY_PARTS.map(([k, text, c]) => ({ key: k, label: text, value: m[k], color: c }));
  const capacity = m.capacity_bytes;
  return html`
    <section class="figures">
      <${Figure} label="iteration time" value=${seconds(r.iteration_time_s)} testid="iteration-time" raw=${r.iteration_time_s}
        hint="wall-clock time of one training iteration (one optimizer step)"
        note=${r.iteration_time_range_s ? html`<span data-testid="iteration-time-range"
          title="the measured time if this estimate erred as the middle 80 % of published runs of its kind of trainer did (commest validate, out of sample)">
          likely ${seconds(r.iteration_time_range_s[0])} – ${seconds(r.iteration_time_range_s[1])}</span>` : null} />
      <${Figure} label="throughput" value=${html`${count(r.throughput.tokens_per_s)} <small>tokens/s</small>`} testid="tokens-per-s" />
      <${Figure} label="MFU" value=${pct(r.throughput.mfu)} hint="model FLOPs utilisation: model FLOP/s per GPU over peak" testid="mfu" />
      <${Figure} label="HFU" value=${pct(r.throughput.hfu)} hint="hardware FLOPs utilisation (counts recomputation)" />
      <${Figure} label="model FLOP/s per GPU" value=${html`${sig(r.throughput.model_tflops_per_gpu, 3)} <small>TFLOP/s</small>`} />
      <${Figure} label="GPUs · micro-batches" value=${`${num(r.gpus)} · ${num(r.micro_batches)}`} hint="GPUs of the layout; micro-batches per iteration per pipeline" />
    </section>
    <section>
      <h3>Where the iteration time goes <small class="muted">(seconds per iteration; exposed, after overlap)</small></h3>
      <${StackedBar} parts=${terms} format=${seconds} testid="breakdown" />
      <p class="ratios">
        <span>communication ratio <strong data-testid="comm-ratio">${pct(r.ratios.communication)}</strong></span>
        <span>bubble ratio <strong>${pct(r.ratios.bubble)}</strong></span>
        <span>${num(r.parameters / 1e9, 2)} B parameters (${num(r.parameters_per_gpu / 1e9, 3)} B per GPU)</span>
        <span>${r.framework.name} framework, ${r.fidelity} fidelity</span>
        ${r.validated ? html`<span data-testid="validated" class=${r.validated.misses_target ? "advice" : ""}
            title="commest validate: published runs of this kind of trainer, predicted out of sample (mean signed error ${num(r.validated.mean_error_pct, 1)} %)">
            validated: ${num(r.validated.mean_abs_error_pct, 1)} % mean error on ${num(r.validated.runs)} published ${r.validated.trainer_kind} runs</span>` : null}
        ${r.validated && r.validated.fine_grained_moe ? html`<span data-testid="validated-fine-grained-moe"
            class=${r.validated.fine_grained_moe.misses_target ? "advice" : ""}
            title="commest validate: published MoE runs whose experts are narrower than the model, predicted out of sample (${num(r.validated.fine_grained_moe.min_error_pct, 1)} % to ${num(r.validated.fine_grained_moe.max_error_pct, 1)} %; see the warnings)">
            experts narrower than the model: ${num(r.validated.fine_grained_moe.mean_abs_error_pct, 1)} % mean error on the ${num(r.validated.fine_grained_moe.runs)} such runs</span>` : null}
        ${r.validated && r.validated.same_model ? html`<${SameModel} same=${r.validated.same_model} kind=${r.validated.trainer_kind} showRuns=${showRuns} />` : null}
      </p>
    </section>
    <section>
      <h3>Memory per GPU
        ${m.fits === true ? html`<span class="badge good">fits</span>` : m.fits === false ? html`<span class="badge bad">does not fit</span>` : null}
      </h3>
      <p class="small">${bytes(m.total_bytes)} ${capacity ? html`of ${bytes(capacity)} capacity (${pct(m.total_bytes / capacity, 0)} used)` : "(capacity unknown)"}</p>
      <${StackedBar} parts=${parts} limit=${capacity} limitLabel=${capacity ? `capacity ${bytes(capacity)}` : ""} format=${bytes} testid="memory" />
    </section>
    <section>
      <h3>Collectives <small class="muted">(per GPU; each bandwidth with where it came from)</small></h3>
      <${Collectives} rows=${r.collectives} />
      <p class="muted small">Cluster: ${r.cluster.profile || "explicit figures"} — ${r.cluster.bandwidth}; u = ${num(r.cluster.utilization, 3)} (${r.cluster.utilization_source}).</p>
    </section>
    <${Notes} warnings=${r.warnings} assumptions=${r.assumptions} />
  `;
}

export function EstimateView({ state, showRuns }) {
  const { result, error, busy } = state;
  return html`<div data-testid="estimate-view">
    <${Busy} busy=${busy}>Estimating…<//>
    <${ErrorBox} error=${error} />
    ${result ? html`<${EstimateResult} result=${result} showRuns=${showRuns} />` : !busy && !error ? html`<p class="muted">Pick a scenario on the left and press Estimate.</p>` : null}
  </div>`;
}
