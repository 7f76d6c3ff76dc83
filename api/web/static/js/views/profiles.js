// Profiles: measured bandwidth curves against the nominal ones, the uploads, and new uploads
// by drag and drop (the write token is asked for once and kept in sessionStorage).
import { html, useEffect, useState } from "../lib.js";
import { api, ApiError } from "../api.js";
import { bytes, gbps, num } from "../format.js";
import { ErrorBox, Busy } from "../common.js";

const TOKEN_KEY = "commest-token";
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#59a14f", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7"];
const W = 760;
const H = 360;
const M = { l: 64, r: 16, t: 12, b: 40 };

/** A round step giving about `count` intervals up to `max`. */
function niceStep(max, count) {
  const raw = max / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((k) => k * mag).find((v) => v >= raw);
}

/** A power-of-two size as nccl-tests sweeps them: 32 B, 1 KiB, 32 MiB, 1 GiB. */
function binary(size) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let k = 0;
  while (size >= 1024 && k < units.length - 1) { size /= 1024; k++; }
  return `${num(size, size < 10 && size % 1 ? 1 : 0)} ${units[k]}`;
}

function Curves({ curves, showNominal }) {
  const shown = curves.filter((c) => showNominal || !c.nominal);
  if (!shown.length) return html`<p class="muted">No curves for this collective.</p>`;
  const xs = shown.flatMap((c) => c.sizes_bytes).filter((s) => s > 0);
  const ys = shown.flatMap((c) => c.busbw_gbps);
  const x0 = Math.log2(Math.min(...xs));
  const x1 = Math.log2(Math.max(...xs));
  const step = niceStep(Math.max(...ys) || 1, 5);
  const y1 = Math.ceil((Math.max(...ys) || 1) / step) * step;
  const x = (s) => M.l + ((W - M.l - M.r) * (Math.log2(s) - x0)) / (x1 - x0 || 1);
  const y = (v) => H - M.b - ((H - M.t - M.b) * v) / y1;
  const xticks = [];
  for (let e = Math.ceil(x0 / 5) * 5; e <= x1; e += 5) xticks.push(2 ** e);
  const yticks = Array.from({ length: Math.round(y1 / step) + 1 }, (_, i) => i * step);
  const measured = shown.filter((c) => !c.nominal);
  const scales = new Set(measured.map((c) => `${c.ranks}/${c.nodes}`));
  const matching = (c) => c.nominal && scales.has(`${c.ranks}/${c.nodes}`);
  return html`
    <svg class="curves" data-testid="curves" viewBox=${`0 0 ${W} ${H}`} role="img" aria-label="bus bandwidth by message size">
      ${yticks.map((v) => html`<g class="tick"><line x1=${M.l} x2=${W - M.r} y1=${y(v)} y2=${y(v)} class="grid" />
        <text x=${M.l - 6} y=${y(v) + 4} text-anchor="end">${num(v, step < 1 ? 1 : 0)}</text></g>`)}
      ${xticks.map((s) => html`<g class="tick"><line x1=${x(s)} x2=${x(s)} y1=${M.t} y2=${H - M.b} class="grid" />
        <text x=${x(s)} y=${H - M.b + 16} text-anchor="middle">${binary(s)}</text></g>`)}
      <text x=${(W + M.l) / 2} y=${H - 6} text-anchor="middle" class="axis-title">message size (log scale, powers of two)</text>
      <text transform=${`translate(14 ${(H - M.b) / 2}) rotate(-90)`} text-anchor="middle" class="axis-title">bus bandwidth (GB/s)</text>
      ${shown.map((c) => {
        const i = measured.indexOf(c);
        const d = c.sizes_bytes.map((s, k) => `${k ? "L" : "M"}${x(s).toFixed(1)},${y(c.busbw_gbps[k]).toFixed(1)}`).join("");
        const cls = c.nominal ? `nominal${matching(c) ? " match" : ""}` : "measured";
        return html`<path d=${d} class=${cls} stroke=${c.nominal ? (matching(c) ? "#444" : "#9a9a9a") : PALETTE[i % PALETTE.length]}>
          <title>${c.label}</title></path>`;
      })}
    </svg>
    <ul class="inline-legend">
      ${measured.map((c, i) => html`<li><span class="swatch" style=${{ background: PALETTE[i % PALETTE.length] }}></span>${c.label}</li>`)}
      ${showNominal ? html`<li><span class="swatch dashed"></span>nominal (vendor link rates), ${shown.length - measured.length} scales${scales.size ? "; darker: at a measured run's scale" : ""} (hover a curve for its name)</li>` : null}
    </ul>`;
}

function Uploads({ uploads }) {
  if (!uploads.length) return html`<p class="muted" data-testid="uploads-empty">No uploads yet: drop nccl-tests output above.</p>`;
  return html`<table class="data" data-testid="uploads">
    <thead><tr><th>#</th><th>file</th><th>label</th><th class="num">size</th><th class="num">runs</th><th>quality</th><th>uploaded</th></tr></thead>
    <tbody>${uploads.map((u) => html`<tr class=${u.disabled ? "disabled" : ""}>
      <td>${u.id}</td><td>${u.filename || "(text)"}</td><td>${u.label || html`<span class="muted">—</span>`}</td>
      <td class="num">${bytes(u.size_bytes)}</td><td class="num">${u.run_count}</td>
      <td>${u.disabled ? html`<span class="badge">disabled</span>` : null}
        ${u.flags.length ? u.flags.map((f) => html`<span class="badge weak" title=${f.message}>${f.code}</span>`) : html`<span class="badge good">no flags</span>`}</td>
      <td class="small">${new Date(u.created_at).toLocaleString()}</td>
    </tr>`)}</tbody></table>`;
}

export function ProfilesView({ profiles, active }) {
  const [name, setName] = useState(profiles[0]?.name || "");
  const [op, setOp] = useState("all_reduce");
  const [showNominal, setShowNominal] = useState(true);
  const [data, setData] = useState({ curves: null, uploads: null, error: null, busy: false });
  const [pending, setPending] = useState(null); // files waiting for the token
  const [label, setLabel] = useState("");
  const [tokenInput, setTokenInput] = useState("");
  const [upload, setUpload] = useState({ busy: false, error: null, result: null });
  const [over, setOver] = useState(false);

  const load = async () => {
    if (!name) return;
    setData((d) => ({ ...d, busy: true, error: null }));
    try {
      const [c, u] = await Promise.all([
        api(`/v1/profiles/${encodeURIComponent(name)}/curves?format=json`),
        api(`/v1/profiles/${encodeURIComponent(name)}/uploads`),
      ]);
      setData({ curves: c.curves, uploads: u.uploads, error: null, busy: false });
    } catch (error) {
      setData({ curves: null, uploads: null, error, busy: false });
    }
  };
  useEffect(() => { if (active) load(); }, [name, active]);

  const send = async (files, token) => {
    setUpload({ busy: true, error: null, result: null });
    const form = new FormData();
    for (const f of files) form.append("file", f, f.name);
    const query = label ? `?label=${encodeURIComponent(label)}` : "";
    try {
      const result = await api(`/v1/profiles/${encodeURIComponent(name)}/runs${query}`, { method: "POST", form, token });
      setPending(null);
      setUpload({ busy: false, error: null, result });
      load();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        setPending(files);
      }
      setUpload({ busy: false, error, result: null });
    }
  };
  const accept = (files) => {
    if (!files.length) return;
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) send(files, token);
    else setPending(files);
  };
  const submitToken = (e) => {
    e.preventDefault();
    if (!tokenInput) return;
    sessionStorage.setItem(TOKEN_KEY, tokenInput);
    setTokenInput("");
    if (pending) send(pending, sessionStorage.getItem(TOKEN_KEY));
  };

  const ops = data.curves ? [...new Set(data.curves.map((c) => c.op))] : [];
  const curves = (data.curves || []).filter((c) => c.op === op);
  return html`<div data-testid="profiles-view">
    <div class="toolbar">
      <label>profile <select value=${name} data-testid="profile-select" onChange=${(e) => setName(e.currentTarget.value)}>
        ${profiles.map((p) => html`<option value=${p.name} selected=${p.name === name}>${p.name}</option>`)}</select></label>
      <label>collective <select value=${op} onChange=${(e) => setOp(e.currentTarget.value)}>
        ${(ops.length ? ops : [op]).map((o) => html`<option value=${o} selected=${o === op}>${o.replaceAll("_", "-")}</option>`)}</select></label>
      <label class="check"><input type="checkbox" checked=${showNominal} onChange=${(e) => setShowNominal(e.currentTarget.checked)} /> nominal curves (dashed)</label>
    </div>
    <${Busy} busy=${data.busy}>Loading curves…<//>
    <${ErrorBox} error=${data.error} />
    ${data.curves ? html`<${Curves} curves=${curves} showNominal=${showNominal} />` : null}
    <h3>Upload benchmark output</h3>
    <div class=${`dropzone ${over ? "over" : ""}`} data-testid="dropzone"
      onDragOver=${(e) => { e.preventDefault(); setOver(true); }}
      onDragLeave=${() => setOver(false)}
      onDrop=${(e) => { e.preventDefault(); setOver(false); accept([...(e.dataTransfer?.files || [])]); }}>
      <p><strong>Drop nccl-tests (or osu) output files here</strong> to add measured curves to <code>${name}</code>,
        or <label class="filepick">choose files<input type="file" multiple onChange=${(e) => accept([...e.currentTarget.files])} /></label>.</p>
      <label>label for this upload (optional) <input type="text" maxlength="128" value=${label} data-testid="upload-label"
        onInput=${(e) => setLabel(e.currentTarget.value)} placeholder="e.g. cluster B, NCCL 2.21" /></label>
    </div>
    ${pending
      ? html`<form class="token" onSubmit=${submitToken} data-testid="token-form">
          <label>Uploads need the server's write token (asked once; kept for this browser tab only)
            <input type="password" autocomplete="off" value=${tokenInput} data-testid="token" onInput=${(e) => setTokenInput(e.currentTarget.value)} /></label>
          <button type="submit" class="primary">Upload ${pending.length} file${pending.length > 1 ? "s" : ""}</button>
        </form>`
      : null}
    <${Busy} busy=${upload.busy}>Uploading…<//>
    <${ErrorBox} error=${upload.error} />
    ${upload.result
      ? html`<div class="ok" data-testid="upload-result">Stored ${upload.result.runs.length} run${upload.result.runs.length === 1 ? "" : "s"}:
          ${upload.result.runs.map((r) => `${r.collective} ${r.ranks} ranks on ${r.nodes} node(s)${r.beta_busbw_gbps ? `, β ${gbps(r.beta_busbw_gbps)} busbw` : ""}${r.already_stored ? " (already stored)" : ""}`).join("; ")}
          ${upload.result.warnings.length ? html`<ul class="small">${upload.result.warnings.map((w) => html`<li>${w}</li>`)}</ul>` : null}</div>`
      : null}
    <h3>Uploads to ${name}</h3>
    ${data.uploads ? html`<${Uploads} uploads=${data.uploads} />` : null}
  </div>`;
}
