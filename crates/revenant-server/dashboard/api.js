// The JSON API client: the token, requests, and errors as values a view can show.
//
// Requests go to `v1/...` relative to the page, so a server mounted under a prefix by a
// reverse proxy works unchanged. The token lives in sessionStorage: it survives a
// reload but not closing the tab, and it is never written into the URL.

const TOKEN_KEY = "revenant.token";

export function token() {
  try { return sessionStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

export function setToken(value) {
  try {
    if (value) sessionStorage.setItem(TOKEN_KEY, value);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch { /* storage disabled: the token lasts until the page is closed */ }
}

/**
 * An API failure. `status` is the HTTP status (0 when the server did not answer),
 * `code` and `message` come from the API's `{"error":{"code","message"}}` body.
 */
export class ApiError extends Error {
  constructor(status, code, message, extra = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.extra = extra;
  }

  /** The server could not be reached at all (down, restarting, network gone). */
  get unreachable() { return this.status === 0; }

  /** The token is missing/wrong (401) or lacks the scope this call needs (403). */
  get auth() { return this.status === 401 || this.status === 403; }

  /** The scope the call needs, when the server says (or when we can tell). */
  get scope() { return this.extra.scope || this.extra.required_scope || scopeFromMessage(this.message); }
}

// The scopes of the OpenAPI document (`x-revenant-scope`).
const SCOPES = /\b(admin|produce|work|metrics)\b/;

/**
 * The scope a 401/403 message says the route needs: the server writes
 * `token "ci" has scope produce; this route needs admin (or admin)`.
 */
function scopeFromMessage(message) {
  const m = /needs (?:a bearer token with )?(?:scope )?`?(admin|produce|work|metrics)\b/.exec(message || "");
  if (m) return m[1];
  const any = /scope/i.test(message || "") ? SCOPES.exec(message) : null;
  return any ? any[1] : null;
}

const TIMEOUT_MS = 10000;

/** One request. Resolves to the parsed JSON body; rejects with an `ApiError`. */
export async function request(method, path, body) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), TIMEOUT_MS);
  let response;
  try {
    response = await fetch(`v1/${path.replace(/^\//, "")}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: controller.signal,
      cache: "no-store",
    });
  } catch (err) {
    const why = err && err.name === "AbortError" ? `no answer within ${TIMEOUT_MS / 1000}s` : "the server did not answer";
    throw new ApiError(0, "unreachable", why);
  } finally {
    clearTimeout(timer);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!response.ok) {
    const e = (data && data.error) || {};
    const { code, message, ...extra } = e;
    throw new ApiError(
      response.status,
      code || `http_${response.status}`,
      message || (text && !data ? text.slice(0, 300) : response.statusText || "request failed"),
      extra,
    );
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body = {}) => request("POST", path, body);

/** A query string from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}
