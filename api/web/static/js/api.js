// The REST API (same origin, under /v1). Errors are RFC 9457 problem details.

export class ApiError extends Error {
  constructor(status, problem) {
    const p = problem && typeof problem === "object" ? problem : { detail: String(problem ?? "") };
    super(p.detail || p.title || `HTTP ${status}`);
    this.status = status;
    this.problem = p;
  }
}

export async function api(path, { method = "GET", json, form, token, signal } = {}) {
  const headers = { Accept: "application/json" };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { method, headers, body, signal });
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) throw new ApiError(response.status, data);
  return data;
}

/** What went wrong, in the server's words (title, detail, each field's rule). */
export function describe(error) {
  if (!(error instanceof ApiError)) return String(error?.message ?? error);
  const p = error.problem;
  const lines = [`${p.title || "Error"} (HTTP ${error.status})`];
  if (p.detail) lines.push(p.detail);
  for (const e of p.errors || []) {
    const line = `${e.field}: ${e.rule}`;
    if (!lines.some((l) => l.includes(line))) lines.push(line);
  }
  return lines.join("\n");
}
