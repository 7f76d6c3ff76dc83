// The scenario (model, layout, training, cluster) shared by Estimate, Timeline, Traffic and
// Plan, its form, and the EstimateRequest it makes (api/schemas.py).
import { html } from "./lib.js";
import { bytes, num } from "./format.js";

export const SHAPE_FIELDS = [
  ["num_layers", "layers"],
  ["hidden_size", "hidden size"],
  ["num_attention_heads", "attention heads"],
  ["seq_length", "sequence length (tokens)"],
  ["vocab_size", "vocabulary size"],
];
export const CUSTOM = "__custom__";
// Shape fields the form does not edit but a custom shape keeps from the preset it started from
// (grouped-query attention, gated MLP, untied embeddings, MoE, heads wider than h / heads):
// without them "custom" would silently be another model. The preset's own parameter count is
// not kept: it would no longer match an edited shape.
const KEPT_FIELDS = [
  "ffn_hidden_size",
  "swiglu",
  "num_query_groups",
  "tied_embeddings",
  "moe_num_experts",
  "moe_top_k",
  "moe_every_k_layers",
  "moe_ffn_hidden_size",
  "kv_channels",
];

/** What a shape adds to the five edited fields, in words ("" for a plain GPT). */
export function shapeExtras(spec) {
  const out = [];
  if (spec.num_query_groups && spec.num_query_groups !== spec.num_attention_heads) out.push(`${spec.num_query_groups} KV groups`);
  if (spec.kv_channels) out.push(`heads ${spec.kv_channels} wide`);
  if (spec.swiglu) out.push("gated MLP");
  if (spec.moe_num_experts > 1) out.push(`${spec.moe_num_experts} experts, ${spec.moe_top_k} per token${spec.moe_ffn_hidden_size ? `, ${spec.moe_ffn_hidden_size} wide` : ""}`);
  if (spec.tied_embeddings === false) out.push("untied embeddings");
  return out.join(", ");
}

export const defaultScenario = {
  preset: "gpt3-175b",
  shape: { num_layers: 96, hidden_size: 12288, num_attention_heads: 96, seq_length: 2048, vocab_size: 51200 },
  pipeline: 8,
  tensor: 8,
  data: 24,
  virtual_stages: 1,
  context_parallel: 1,
  expert_parallel: 1,
  expert_tensor_parallel: null,
  moe_token_dispatcher: "alltoall",
  sequence_parallel: false,
  zero_stage: 0,
  global_batch_size: 1536,
  micro_batch_size: 1,
  recompute: "full",
  recompute_num_layers: "",
  precision: "fp16",
  framework: "megatron-lm",
  profile: "dgx-a100-nominal",
  fidelity: "detailed",
};

const n = (v) => (v === "" || v === null || v === undefined ? v : Number(v));

/** Block recompute's layers per chunk, when the scenario replays only some (else absent). */
export function replayedLayers(s) {
  const v = s.recompute_num_layers;
  return s.recompute === "full" && v !== "" && v !== null && v !== undefined ? { recompute_num_layers: Number(v) } : {};
}

export function modelBody(s) {
  if (s.preset !== CUSTOM) return { preset: s.preset };
  const kept = KEPT_FIELDS.filter((k) => s.shape[k] !== null && s.shape[k] !== undefined).map((k) => [k, s.shape[k]]);
  return Object.fromEntries([...SHAPE_FIELDS.map(([k]) => [k, n(s.shape[k])]), ...kept]);
}

/** POST /v1/estimates (and /v1/timelines, /v1/traffic-matrices) body. */
export function requestBody(s) {
  return {
    model: modelBody(s),
    layout: {
      pipeline: n(s.pipeline),
      tensor: n(s.tensor),
      data: n(s.data),
      virtual_stages: n(s.virtual_stages),
      context_parallel: n(s.context_parallel),
      expert_parallel: n(s.expert_parallel || 1),
      expert_tensor_parallel: s.expert_tensor_parallel ? 1 : null,
      sequence_parallel: !!s.sequence_parallel,
      zero_stage: n(s.zero_stage),
    },
    training: {
      global_batch_size: n(s.global_batch_size),
      micro_batch_size: n(s.micro_batch_size),
      recompute: s.recompute,
      ...replayedLayers(s),
      precision: s.precision,
      framework: s.framework,
      moe_token_dispatcher: s.moe_token_dispatcher || "alltoall",
    },
    cluster: { profile: s.profile },
    fidelity: s.fidelity,
  };
}

export const gpuCount = (s) => n(s.pipeline) * n(s.tensor) * n(s.data) * n(s.context_parallel || 1);

function NumberField({ label, value, onInput, min = 1, name, hint, placeholder }) {
  return html`<label title=${hint || ""}>
    <span>${label}</span>
    <input type="number" name=${name} min=${min} step="1" value=${value} placeholder=${placeholder || ""}
      onInput=${(e) => onInput(e.currentTarget.value)} />
  </label>`;
}

function Select({ label, value, onChange, options, name, hint }) {
  return html`<label title=${hint || ""}>
    <span>${label}</span>
    <select name=${name} value=${value} onChange=${(e) => onChange(e.currentTarget.value)}>
      ${options.map(([v, text]) => html`<option value=${v} selected=${v === value}>${text}</option>`)}
    </select>
  </label>`;
}

/**
 * The form. `layoutFixed`: the Plan view chooses the layout itself, so its fields are off.
 * `action`: the submit button's text.
 */
export function ScenarioForm({ scenario: s, setScenario, catalog, onSubmit, action, layoutFixed }) {
  const set = (patch) => setScenario({ ...s, ...patch });
  const models = catalog.models || [];
  const preset = models.find((m) => m.key === s.preset);
  const profile = (catalog.profiles || []).find((p) => p.name === s.profile);
  const gpus = gpuCount(s);
  const perNode = profile ? profile.gpus_per_node : null;
  const spec = s.preset === CUSTOM ? s.shape : preset ? preset.spec : {};
  const moe = Number(spec.moe_num_experts) > 1;
  const choosePreset = (key) => {
    const next = models.find((m) => m.key === key);
    // Expert parallelism only means something for a MoE model: a dense one goes back to 1.
    const ep = next && !(next.spec.moe_num_experts > 1) ? { expert_parallel: 1, expert_tensor_parallel: null, moe_token_dispatcher: "alltoall" } : {};
    if (key === CUSTOM) {
      const fields = [...SHAPE_FIELDS.map(([k]) => k), ...KEPT_FIELDS];
      const shape = preset ? Object.fromEntries(fields.map((k) => [k, preset.spec[k]])) : s.shape;
      set({ preset: CUSTOM, shape });
    } else set({ preset: key, ...ep });
  };
  return html`
    <form class="scenario" data-testid="scenario" onSubmit=${(e) => { e.preventDefault(); onSubmit(); }}>
      <fieldset>
        <legend>Model</legend>
        <${Select} label="preset" name="preset" value=${s.preset} onChange=${choosePreset}
          options=${[...models.map((m) => [m.key, `${m.key} (${num(m.parameters / 1e9, 1)} B params)`]), [CUSTOM, "custom shape…"]]} />
        ${s.preset === CUSTOM
          ? html`${SHAPE_FIELDS.map(([k, text]) => html`<${NumberField} label=${text} name=${k} value=${s.shape[k]}
              onInput=${(v) => set({ shape: { ...s.shape, [k]: v } })} />`)}
              ${shapeExtras(s.shape) ? html`<p class="muted small" data-testid="shape-kept">kept from the preset: ${shapeExtras(s.shape)}</p>` : null}`
          : preset
            ? html`<p class="muted small" title=${`source: ${preset.source}`}>${`${preset.spec.num_layers} layers, hidden size ${preset.spec.hidden_size}, ${preset.spec.num_attention_heads} heads, ${preset.spec.seq_length} tokens per sequence`}${shapeExtras(preset.spec) ? `; ${shapeExtras(preset.spec)}` : ""}</p>`
            : null}
      </fieldset>
      <fieldset disabled=${layoutFixed}>
        <legend>Layout ${layoutFixed ? html`<small>(the plan picks it)</small>` : null}</legend>
        <div class="row3">
          <${NumberField} label="pipeline p" name="pipeline" value=${s.pipeline} onInput=${(v) => set({ pipeline: v })} hint="pipeline-parallel stages" />
          <${NumberField} label="tensor t" name="tensor" value=${s.tensor} onInput=${(v) => set({ tensor: v })} hint="tensor-parallel ranks" />
          <${NumberField} label="data d" name="data" value=${s.data} onInput=${(v) => set({ data: v })} hint="data-parallel replicas" />
        </div>
        <p class="muted small" data-testid="gpu-count">= ${Number.isFinite(gpus) ? num(gpus) : "?"} GPUs${perNode && Number.isFinite(gpus) ? ` (${num(gpus / perNode, gpus % perNode ? 1 : 0)} nodes of ${perNode})` : ""}</p>
        <div class="row3">
          <${NumberField} label="interleaving v" name="virtual_stages" value=${s.virtual_stages} onInput=${(v) => set({ virtual_stages: v })} hint="virtual pipeline stages (model chunks) per GPU" />
          <${NumberField} label="context cp" name="context_parallel" value=${s.context_parallel} onInput=${(v) => set({ context_parallel: v })} hint="context-parallel ranks (sequence split across GPUs); GPUs = p·t·d·cp" />
          <${Select} label="ZeRO stage" name="zero_stage" value=${String(s.zero_stage)} onChange=${(v) => set({ zero_stage: v })} options=${[["0", "0 (none)"], ["1", "1"], ["2", "2"], ["3", "3"]]} />
        </div>
        ${moe
          ? html`<${NumberField} label="experts ep" name="expert_parallel" value=${s.expert_parallel || 1} onInput=${(v) => set({ expert_parallel: v })}
              hint=${`expert-parallel ranks: the ${spec.moe_num_experts} experts split over ep of the d·cp data ranks (ep divides d·cp and the expert count; folded over TP, t·d·cp)`} />
            <label class="check" title="Megatron-Core's --expert-tensor-parallel-size 1 (parallel folding): each expert runs whole, its ep group spanning the TP ranks too; needs sequence parallelism when t > 1"><input type="checkbox" name="expert_tensor_parallel" checked=${!!s.expert_tensor_parallel}
              onChange=${(e) => set({ expert_tensor_parallel: e.currentTarget.checked ? 1 : null })} /> experts whole, folded over TP (expert TP 1)</label>`
          : null}
        <label class="check"><input type="checkbox" name="sequence_parallel" checked=${s.sequence_parallel}
          onChange=${(e) => set({ sequence_parallel: e.currentTarget.checked })} /> sequence parallelism</label>
      </fieldset>
      <fieldset>
        <legend>Training</legend>
        <div class="row2">
          <${NumberField} label="global batch (sequences)" name="global_batch_size" value=${s.global_batch_size} onInput=${(v) => set({ global_batch_size: v })} />
          <${NumberField} label="micro-batch (sequences)" name="micro_batch_size" value=${s.micro_batch_size} onInput=${(v) => set({ micro_batch_size: v })} />
        </div>
        <div class="row2">
          <${Select} label="recompute" name="recompute" value=${s.recompute} onChange=${(v) => set({ recompute: v })}
            options=${[["none", "none"], ["selective", "selective"], ["full", "full"]]} />
          <${Select} label="precision" name="precision" value=${s.precision} onChange=${(v) => set({ precision: v })}
            options=${["fp32", "tf32", "fp16", "bf16", "fp8"].map((p) => [p, p])} />
        </div>
        ${s.recompute === "full"
          ? html`<${NumberField} label="layers replayed per pipeline chunk" name="recompute_num_layers" min="0"
              value=${s.recompute_num_layers ?? ""} placeholder="all" onInput=${(v) => set({ recompute_num_layers: v })}
              hint="Megatron's --recompute-method block --recompute-num-layers N: the first N layers of each (virtual) pipeline chunk replay their forward pass, the others keep their activations; blank: every layer" />`
          : null}
        <${Select} label="framework" name="framework" value=${s.framework} onChange=${(v) => set({ framework: v })}
          hint=${(catalog.frameworks || []).find((f) => f.name === s.framework)?.description || ""}
          options=${(catalog.frameworks || []).map((f) => [f.name, f.name])} />
        ${moe
          ? html`<${Select} label="MoE token dispatcher" name="moe_token_dispatcher" value=${s.moe_token_dispatcher || "alltoall"}
              onChange=${(v) => set({ moe_token_dispatcher: v })}
              hint="Megatron's --moe-token-dispatcher-type: alltoall puts each of a token's routed copies on the wire; flex (DeepEP, HybridEP) sends a token to each remote node once over RDMA, then to each rank once over NVLink"
              options=${[["alltoall", "alltoall"], ["flex", "flex (DeepEP, HybridEP)"]]} />`
          : null}
      </fieldset>
      <fieldset>
        <legend>Cluster</legend>
        <${Select} label="profile" name="profile" value=${s.profile} onChange=${(v) => set({ profile: v })}
          options=${(catalog.profiles || []).map((p) => [p.name, `${p.name}${p.nominal ? " (nominal)" : ""}`])} />
        ${profile
          ? html`<p class="muted small">${profile.gpu_model}, ${profile.gpus_per_node} GPUs per node${profile.gpu_memory_bytes ? `, ${bytes(profile.gpu_memory_bytes)} per GPU` : ""}${profile.peak_tflops ? `, ${num(profile.peak_tflops)} TFLOP/s peak` : ""}</p>`
          : null}
        <${Select} label="fidelity" name="fidelity" value=${s.fidelity} onChange=${(v) => set({ fidelity: v })}
          options=${[["detailed", "detailed"], ["paper", "paper (scalar C, u)"]]} />
      </fieldset>
      ${action ? html`<button type="submit" class="primary" data-testid="submit">${action}</button>` : null}
    </form>
  `;
}
