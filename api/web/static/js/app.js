// The planner's page: a scenario on the left, six views on the right (tabs, kept in the URL
// hash). Each view asks the API (/v1) for its figures and draws them here (no server-side HTML).
import { html, render, useEffect, useRef, useState } from "./lib.js";
import { api } from "./api.js";
import { ErrorBox } from "./common.js";
import { ScenarioForm, defaultScenario, gpuCount, modelBody, replayedLayers, requestBody } from "./scenario.js";
import { EstimateView } from "./views/estimate.js";
import { TimelineView } from "./views/timeline.js";
import { TrafficView } from "./views/traffic.js";
import { PlanView } from "./views/plan.js";
import { ProfilesView } from "./views/profiles.js";
import { AccuracyView } from "./views/accuracy.js";

const TABS = [
  ["estimate", "Estimate", "Estimate"],
  ["timeline", "Pipeline timeline", "Draw timeline"],
  ["traffic", "Traffic", "Draw matrix"],
  ["plan", "Plan", null],
  ["profiles", "Profiles", null],
  ["accuracy", "Accuracy", null],
];
const WIDE = ["profiles", "accuracy"]; // tabs without the scenario form
const AUTO_GPU_LEVEL = 128; // "auto" draws GPU by GPU up to this many GPUs, else node by node
const idle = { result: null, error: null, busy: false, key: null };
const tabFromHash = () => {
  const h = location.hash.replace("#", "");
  return TABS.some(([k]) => k === h) ? h : "estimate";
};

function App() {
  const [tab, setTab] = useState(tabFromHash());
  const [catalog, setCatalog] = useState(null);
  const [catalogError, setCatalogError] = useState(null);
  const [scenario, setScenario] = useState(defaultScenario);
  const [views, setViews] = useState({ estimate: idle, timeline: idle, traffic: idle, plan: idle });
  const [level, setLevel] = useState("auto");
  const [accuracyModel, setAccuracyModel] = useState("");
  const [accuracyKind, setAccuracyKind] = useState("");
  const seq = useRef({});

  useEffect(() => {
    const onHash = () => setTab(tabFromHash());
    window.addEventListener("hashchange", onHash);
    Promise.all([api("/v1/presets/models"), api("/v1/presets/frameworks"), api("/v1/profiles?limit=1000")])
      .then(([models, frameworks, profiles]) => {
        setCatalog({ models, frameworks, profiles: profiles.profiles });
        const s = { ...defaultScenario };
        if (!profiles.profiles.some((p) => p.name === s.profile) && profiles.profiles.length) s.profile = profiles.profiles[0].name;
        setScenario(s);
        runView("estimate", s);
      })
      .catch(setCatalogError);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);

  const request = (view, s, extra) => {
    if (view === "plan") {
      return ["/v1/plans", {
        model: modelBody(s),
        training: {
          global_batch_size: Number(s.global_batch_size),
          // block recompute: what a swept "full" replays, when the plan sweeps full
          ...(!extra?.recompute_num_layers && (!extra?.recompute || extra.recompute.includes("full")) ? replayedLayers(s) : {}),
          precision: s.precision,
          framework: s.framework,
          moe_token_dispatcher: s.moe_token_dispatcher || "alltoall",
        },
        cluster: { profile: s.profile },
        fidelity: s.fidelity,
        ...extra,
      }];
    }
    const body = requestBody(s);
    if (view === "timeline") return ["/v1/timelines", body];
    if (view === "traffic") {
      const chosen = extra?.level || level;
      const auto = gpuCount(s) <= AUTO_GPU_LEVEL ? "gpu" : "node";
      return ["/v1/traffic-matrices", { ...body, format: "json", level: chosen === "auto" ? auto : chosen }];
    }
    return ["/v1/estimates", body];
  };

  // Only the latest request of a view may write its answer (a slow earlier one is dropped).
  const runView = async (view, s = scenario, extra) => {
    const [path, body] = request(view, s, extra);
    const key = JSON.stringify(body);
    const n = (seq.current[view] = (seq.current[view] || 0) + 1);
    setViews((v) => ({ ...v, [view]: { ...v[view], busy: true, error: null, key } }));
    try {
      const result = await api(path, { method: "POST", json: body });
      if (seq.current[view] === n) setViews((v) => ({ ...v, [view]: { result, error: null, busy: false, key } }));
    } catch (error) {
      if (seq.current[view] === n) setViews((v) => ({ ...v, [view]: { result: null, error, busy: false, key } }));
    }
  };

  // A view shown for a scenario it has not drawn yet draws it.
  useEffect(() => {
    if (!catalog || !["timeline", "traffic"].includes(tab)) return;
    const [, body] = request(tab, scenario);
    if (views[tab].key !== JSON.stringify(body) && !views[tab].busy) runView(tab);
  }, [tab, catalog]);

  const go = (t) => {
    location.hash = t;
    setTab(t);
  };
  const loadLayout = (layout) => {
    const s = { ...scenario, ...layout, recompute_num_layers: layout.recompute_num_layers ?? "" };
    setScenario(s);
    go("estimate");
    runView("estimate", s);
  };
  const showRuns = (model, kind) => {
    setAccuracyModel(model);
    setAccuracyKind(kind);
    go("accuracy");
  };
  const changeLevel = (l) => {
    setLevel(l);
    runView("traffic", scenario, { level: l });
  };

  if (catalogError) return html`<main class="page"><${ErrorBox} error=${catalogError} /></main>`;
  if (!catalog) return html`<p class="loading">Loading presets and profiles…</p>`;
  const action = TABS.find(([k]) => k === tab)[2];
  const profile = catalog.profiles.find((p) => p.name === scenario.profile);
  return html`
    <header class="top">
      <h1>commest <small>training iteration planner</small></h1>
      <nav role="tablist">
        ${TABS.map(([k, text]) => html`<a href=${`#${k}`} role="tab" aria-selected=${tab === k} class=${tab === k ? "active" : ""}
          data-testid=${`tab-${k}`} onClick=${(e) => { e.preventDefault(); go(k); }}>${text}</a>`)}
      </nav>
      <a class="apidocs" href="/docs">API docs</a>
    </header>
    <div class=${`layout ${WIDE.includes(tab) ? "wide" : ""}`}>
      ${!WIDE.includes(tab)
        ? html`<aside><${ScenarioForm} scenario=${scenario} setScenario=${setScenario} catalog=${catalog}
            action=${action} layoutFixed=${tab === "plan"} onSubmit=${() => action && runView(tab)} /></aside>`
        : null}
      <main>
        <div hidden=${tab !== "estimate"}><${EstimateView} state=${views.estimate} showRuns=${showRuns} /></div>
        <div hidden=${tab !== "timeline"}><${TimelineView} state=${views.timeline} /></div>
        <div hidden=${tab !== "traffic"}><${TrafficView} state=${views.traffic} level=${level} setLevel=${changeLevel} /></div>
        <div hidden=${tab !== "plan"}><${PlanView} scenario=${scenario} profile=${profile} state=${views.plan}
          run=${(extra) => runView("plan", scenario, extra)} onLoad=${loadLayout} active=${tab === "plan"} /></div>
        <div hidden=${tab !== "profiles"}><${ProfilesView} profiles=${catalog.profiles} active=${tab === "profiles"} /></div>
        <div hidden=${tab !== "accuracy"}><${AccuracyView} active=${tab === "accuracy"}
          model=${accuracyModel} setModel=${setAccuracyModel} kind=${accuracyKind} setKind=${setAccuracyKind} /></div>
      </main>
    </div>`;
}

const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
