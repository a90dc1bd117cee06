// The HTTP API of acceld (docs/api.md). Every call returns the envelope's
// data or throws an ApiError carrying the status, the machine code and, for
// a failed check (HTTP 200, {code:422, data:{type, Data}}, SPEC 5), the
// check as `check`: {type, ...Data} when Data is an object, {type, modes:
// Data} for computeModeSelect (whose Data is the array of modes); the raw
// Data is `checkData`.
const TOKEN_KEY = 'accel.token';

export function getToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ''; } catch { return ''; }
}
export function setToken(t) {
  try {
    if (t) localStorage.setItem(TOKEN_KEY, t); else localStorage.removeItem(TOKEN_KEY);
  } catch { /* private mode: the session still works until reload */ }
}

// "#token=abc" (optionally followed by "&..." or a route) → store it and drop
// it from the address bar so it is not bookmarked or shared by accident.
export function takeTokenFromHash() {
  const h = location.hash || '';
  const m = h.match(/^#(?:\/?[^?]*\?)?token=([^&]+)(?:&(.*))?$/) || h.match(/[#&]token=([^&]+)/);
  if (!m) return false;
  setToken(decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search + '#/accelerator');
  return true;
}

// The failed check of an answer body, or null.
export function failedCheck(body) {
  if (!body || typeof body !== 'object' || body.code !== 422) return null;
  const d = body.data;
  if (!d || typeof d !== 'object' || typeof d.type !== 'string') return null;
  return d;
}

export class ApiError extends Error {
  constructor(status, body) {
    const chk = failedCheck(body);
    const msg = (body && (body.message || body.error)) || (chk ? chk.type : `HTTP ${status}`);
    super(msg);
    this.status = chk ? 422 : status;
    this.code = body && body.error;
    this.data = body && body.data;
    this.checkData = chk ? chk.Data : null;
    this.check = null;
    if (chk) {
      const inner = chk.Data;
      this.check = Array.isArray(inner) ? { type: chk.type, modes: inner }
        : { ...(inner && typeof inner === 'object' ? inner : {}), type: chk.type };
    }
  }
}

let onUnauthorized = () => {};
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

export async function api(method, path, body, token) {
  const headers = { Accept: 'application/json' };
  const tok = token ?? getToken();
  if (tok) headers.Authorization = `Bearer ${tok}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(0, { message: 'The accel daemon cannot be reached.' });
  }
  let json = null;
  const text = await res.text();
  if (text) {
    try { json = JSON.parse(text); } catch { json = { message: text.slice(0, 200) }; }
  }
  if (!res.ok) {
    if (res.status === 401 && token === undefined) onUnauthorized();
    throw new ApiError(res.status, json);
  }
  // a 2xx whose envelope code is not 0/200 refuses (a failed check)
  if (json && typeof json === 'object' && typeof json.code === 'number' &&
      json.code !== 0 && json.code !== 200) throw new ApiError(res.status, json);
  if (json && typeof json === 'object' && 'data' in json && 'code' in json) return json.data;
  return json;
}

const enc = encodeURIComponent;
export const API = {
  resources: () => api('GET', '/api/compute-resources'),
  apps: () => api('GET', '/api/apps'),
  app: (name) => api('GET', `/api/apps/${enc(name)}`),
  logs: (name, offset) => api('GET', `/api/apps/${enc(name)}/logs?offset=${offset || 0}`),
  setSupportType: (node, dev, supportType) =>
    api('PUT', `/api/compute-resources/nodes/${enc(node)}/devices/${enc(dev)}/support-type`, { supportType }),
  setTimeSlice: (node, dev, body) =>
    api('PUT', `/api/compute-resources/nodes/${enc(node)}/devices/${enc(dev)}/time-slice`, body),
  setElastic: (node, dev, body) =>
    api('PUT', `/api/compute-resources/nodes/${enc(node)}/devices/${enc(dev)}/elastic`, body),
  install: (body) => api('POST', '/api/apps', body),
  resume: (name, computeBinding) =>
    api('POST', `/api/apps/${enc(name)}/resume`, computeBinding ? { computeBinding } : {}),
  suspend: (name) => api('POST', `/api/apps/${enc(name)}/suspend`, {}),
  uninstall: (name) => api('DELETE', `/api/apps/${enc(name)}`),
  availability: (name) => api('GET', `/api/apps/${enc(name)}/compute-resources/availability`),
  validate: (name, computeBinding) =>
    api('POST', `/api/apps/${enc(name)}/compute-resources/bindings/validate`, { computeBinding }),
  unbind: (name) => api('DELETE', `/api/apps/${enc(name)}/compute-resources/bindings`),
  // a bound app's quota, live (SPEC 4.4): memory in bytes
  setQuota: (name, dev, memory) =>
    api('PUT', `/api/apps/${enc(name)}/compute-resources/bindings/${enc(dev)}`, { memory }),
  users: (token) => api('GET', '/api/users', undefined, token),
  // the legacy bind (SPEC 5.3): the Select exclusive app picker uses it for a
  // running app (it moves and restarts it); force replaces the holder
  bindLegacy: (id, appName, force) => api('POST', '/api/gpu/update/app', { id, mode: '0', appName, memory: 0, force: !!force }),
  // step omitted: acceld picks the smallest that keeps the answer to 240 points
  history: (range) => api('GET', `/api/metrics/history?range=${range}`),
};
