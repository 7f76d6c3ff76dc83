// Accuracy: the published runs commest was scored on, predicted out of sample (GET
// /v1/validation), worst first, narrowed to one model or kind of run.
import { html, useEffect, useRef, useState } from "../lib.js";
import { api } from "../api.js";
import { num, seconds } from "../format.js";
import { ErrorBox, Busy } from "../common.js";

function layoutText(l) {
  const extra = [l.context_parallel > 1 ? `cp ${l.context_parallel}` : "", l.expert_parallel > 1 ? `ep ${l.expert_parallel}` : "", l.virtual_stages > 1 ? `v ${l.virtual_stages}` : ""].filter(Boolean);
  return `p ${l.pipeline} · t ${l.tensor} · d ${l.data}${extra.length ? ` (${extra.join(", ")})` : ""}`;
}

function Summary({ label, s, testid }) {
  const runs = `${num(s.rows)} run${s.rows === 1 ? "" : "s"}`;
  const detail = `(mean signed ${num(s.mean_error_pct, 1)} %, largest ${num(s.max_abs_error_pct, 1)} %)`;
  return html`<span data-testid=${testid} class=${s.mean_abs_error_pct > 8 ? "advice" : ""}>
    ${label}: <strong>${num(s.mean_abs_error_pct, 1)} %</strong> ${`mean error on ${runs} ${detail}`}</span>`;
}

function Rows({ rows }) {
  if (!rows.length) return html`<p class="muted">No published run of this choice.</p>`;
  return html`<div class="scroll"><table class="data" data-testid="validation-rows">
    <thead><tr>
      <th>run</th><th>model</th><th>trainer</th><th>GPUs</th><th>layout</th><th>precision</th>
      <th class="num">published</th><th class="num">commest</th><th class="num">error</th>
    </tr></thead>
    <tbody>${rows.map((r) => html`<tr>
      <td><span title=${r.source_ref}>${r.id}</span><br /><small class="muted">${r.source}</small></td>
      <td>${r.model}</td>
      <td>${r.framework}</td>
      <td>${num(r.gpus)} × ${r.gpu}</td>
      <td>${layoutText(r.layout)}</td>
      <td>${r.precision}</td>
      <td class="num">${seconds(r.measured_s)}</td>
      <td class="num">${seconds(r.predicted_s)}</td>
      <td class="num" title=${r.fitted_on}>${r.error_pct > 0 ? "+" : ""}${num(r.error_pct, 1)} %</td>
    </tr>`)}</tbody>
  </table></div>`;
}

// `model` may name several models ("llama3-70b / llama3.1-70b": one architecture published
// under two names, as an estimate's validated.same_model gives it); the App keeps it, so an
// estimate can open this tab on its own model's runs.
export function AccuracyView({ active, model, setModel, kind, setKind }) {
  const [state, setState] = useState({ data: null, error: null, busy: false });
  const seq = useRef(0);

  useEffect(() => {
    if (!active) return;
    const query = new URLSearchParams({ sort: "error" });
    for (const name of model ? model.split(" / ") : []) query.append("model", name);
    if (kind) query.append("kind", kind);
    const n = ++seq.current; // only the latest choice may write its answer
    setState((s) => ({ ...s, busy: true, error: null }));
    api(`/v1/validation?${query}`)
      .then((data) => n === seq.current && setState({ data, error: null, busy: false }))
      .catch((error) => n === seq.current && setState({ data: null, error, busy: false }));
  }, [active, model, kind]);

  const d = state.data;
  return html`<div data-testid="accuracy-view">
    <h2>How far commest was off on published runs</h2>
    <p class="small muted">Every run below was predicted out of sample: no fitted constant saw it
      (<code>commest validate</code>; the README's "Accuracy" says how the constants are fitted and where the model is weak).
      Hover a run for its source, an error for the fit that scored it.</p>
    <div class="toolbar">
      <label>model <select value=${model} data-testid="accuracy-model" onChange=${(e) => setModel(e.currentTarget.value)}>
        <option value="">all models</option>
        ${[...(model && !(d?.models || []).includes(model) ? [model] : []), ...(d?.models || [])].map((m) => html`<option value=${m}>${m}</option>`)}
      </select></label>
      <label>kind <select value=${kind} data-testid="accuracy-kind" onChange=${(e) => setKind(e.currentTarget.value)}>
        <option value="">all kinds</option>
        ${(d?.kinds || []).map((k) => html`<option value=${k}>${k}</option>`)}
      </select></label>
    </div>
    <${Busy} busy=${state.busy}>Reading the published runs…<//>
    <${ErrorBox} error=${state.error} />
    ${d ? html`
      <p class="ratios">
        ${model || kind ? html`<${Summary} label="these runs" s=${d.selection} testid="accuracy-selection" />` : null}
        <${Summary} label="all scored runs" s=${d.summary} testid="accuracy-all" />
      </p>
      <${Rows} rows=${d.rows} />` : null}
  </div>`;
}
