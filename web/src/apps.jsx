// Apps: the list with state and owner; install from a manifest file;
// Resume (the dialog of resume.jsx), Stop, Remove from GPU, Uninstall.
import { useEffect, useState } from 'preact/hooks';
import { API } from './api.js';
import { Badge, Empty, Modal, confirmDialog, toast, errText } from './ui.jsx';
import { gi, giCeil, giOr, stateLabel, typeTitle, hasVram, timeAgo, deviceLabel, devNoun, measured } from './format.js';
import { ResumeDialog } from './resume.jsx';
import { elasticText } from './elastic.jsx';
import { removeAppFromGpu } from './accelerator.jsx';
import { useOffline } from './offline.js';

const STATE_KIND = { running: 'good', resuming: 'info', stopping: 'info', failed: 'bad', uninstalling: 'info', releasing: 'info', unknown: 'bad' };
const ACTIVE = new Set(['running', 'resuming']);

function needText(app) {
  const r = app.requirement || (app.requirements || [])[0];
  if (!r) return '—';
  const need = hasVram(r.mode) ? r.requiredGpu : r.requiredMemory;
  return `${typeTitle(r.mode)}${need ? ` · ${giCeil(need)}` : ''}`;
}

// What an app is removed from: its GPU, or the CPU for a CPU app
const unitOf = (app) => ((app.requirement || (app.requirements || [])[0] || {}).mode === 'cpu' ? 'CPU' : 'GPU');

function AllocText({ app, nodes }) {
  const al = app.allocations || [];
  if (!al.length) return <span class="muted">Not assigned</span>;
  const model = (id) => {
    for (const n of nodes || []) for (const d of n.devices || []) if (d.id === id) return deviceLabel(d).replace(/^NVIDIA GeForce /, '');
    return shortId(id);
  };
  return <>{al.map((a) => <span class="chip" key={a.deviceId} title={`${a.deviceId} on ${a.nodeName}`}>{model(a.deviceId)} · {a.nodeName}{a.memory ? ` · ${gi(a.memory)}` : ''}</span>)}</>;
}
const shortId = (id) => (id && id.length > 16 ? `${id.slice(0, 12)}…` : id);

// The YAML parser is half of the page's code and only this dialog needs
// it: it is loaded the first time a YAML file is read (esbuild splitting).
export async function parseManifestText(text, fileName) {
  const t = text.trim();
  if (!t) throw new Error('The file is empty.');
  if (/\.json$/i.test(fileName || '') || t.startsWith('{')) {
    try { return JSON.parse(t); } catch (e) { throw new Error(`The JSON is not valid: ${e.message}`); }
  }
  let YAML;
  try { YAML = await import('yaml'); } catch (e) { throw new Error('The YAML reader could not be loaded; is the accel daemon reachable?'); }
  try {
    const v = YAML.parse(t);
    if (!v || typeof v !== 'object') throw new Error('the document is not a mapping');
    return v;
  } catch (e) { throw new Error(`The YAML is not valid: ${e.message}`); }
}

// What an install did, in words: where it runs, or why it waits.
export function installedText(app, nodes) {
  const where = (app.allocations || []).map((a) => a.nodeName).filter((v, i, s) => s.indexOf(v) === i).join(', ');
  const r = app.requirement || (app.requirements || [])[0] || {};
  if (where) return `${app.name} installed on ${where}${app.state && app.state !== 'installed' ? ` (${stateLabel(app.state).toLowerCase()})` : ''}.`;
  if (app.reason === 'insufficient-resources') {
    const need = (hasVram(r.mode) ? r.requiredGpu : r.requiredMemory) || 0;
    const sizes = (nodes || []).flatMap((n) => n.devices || []).filter((d) => d.mode === r.mode).map((d) => d.memory || 0);
    const noun = devNoun(r.mode);
    if (!r.supportMultiCards && sizes.length && Math.max(...sizes) < need) {
      return `${app.name} installed, but it does not run: no ${noun} is large enough (it needs ${giCeil(need)}, the largest has ${gi(Math.max(...sizes))}).`;
    }
    return `${app.name} installed, but it does not run yet: no ${noun} has room for it now. Resume it once resources are free.`;
  }
  return `${app.name} installed${app.state && app.state !== 'installed' ? `; it is ${stateLabel(app.state).toLowerCase()}` : ''}.`;
}

function InstallDialog({ onClose, refresh, nodes }) {
  const offline = useOffline();
  const [manifest, setManifest] = useState(null);
  const [fileName, setFileName] = useState('');
  const [err, setErr] = useState('');
  const [modes, setModes] = useState(null);
  const [chosen, setChosen] = useState('');
  const [busy, setBusy] = useState(false);
  const onFile = async (e) => {
    const f = e.currentTarget.files && e.currentTarget.files[0];
    setErr(''); setModes(null); setManifest(null);
    if (!f) return;
    setFileName(f.name);
    try { setManifest(await parseManifestText(await f.text(), f.name)); } catch (x) { setErr(x.message); }
  };
  const install = async () => {
    if (!manifest) return;
    setBusy(true); setErr('');
    try {
      const body = { manifest };
      if (chosen) body.selectedGpuType = chosen;
      const app = await API.install(body);
      toast(installedText(app, nodes));
      await refresh();
      onClose();
    } catch (x) {
      if (x.check && x.check.type === 'computeModeSelect') {
        setModes(x.check.modes || []);
        const first = (x.check.modes || []).find((m) => m.status === 'installable')
          || (x.check.modes || []).find((m) => !['not_enough', 'unavailable', 'no-matching-node', 'insufficient-resources'].includes(m.status));
        setChosen(first ? first.computeType : '');
      } else setErr(errText(x));
    } finally { setBusy(false); }
  };
  const meta = manifest && manifest.metadata || {};
  const accel = manifest && manifest.spec && manifest.spec.accelerator || [];
  return (
    <Modal title="Install an app" onClose={onClose}
      footer={<>
        <button class="btn" onClick={onClose}>Cancel</button>
        <button class="btn primary" onClick={install} disabled={offline || !manifest || busy || (modes && !chosen)}>{busy ? 'Installing…' : 'Install'}</button>
      </>}>
      <label for="manifest-file">Manifest file (JSON or YAML)</label>
      <input id="manifest-file" type="file" accept=".json,.yaml,.yml,application/json,application/yaml,text/yaml" onChange={onFile} />
      {manifest && (
        <div class="summary-box">
          <div><b>{meta.title || meta.name || '(no name)'}</b> <span class="muted">{meta.name}</span></div>
          <div class="muted small">{fileName} · runs on {accel.map((a) => typeTitle(a.mode)).join(', ') || 'no accelerator declared'}</div>
        </div>
      )}
      {modes && (
        <fieldset class="chooser">
          <legend>This app can run on more than one kind of accelerator. Choose one:</legend>
          {modes.map((m) => (
            <label class="radio-row" key={m.computeType}>
              <input type="radio" name="compute-type" value={m.computeType} checked={chosen === m.computeType}
                onChange={() => setChosen(m.computeType)} />
              <span><b>{typeTitle(m.computeType)}</b> <span class="muted small">{m.status}{m.reason ? ` · ${m.reason}` : ''}</span></span>
            </label>
          ))}
        </fieldset>
      )}
      {err && <p class="error" role="alert">{err}</p>}
    </Modal>
  );
}

const PAGE = 25;
const REASON_TEXT = {
  'insufficient-resources': 'waiting for GPU resources',
  'replaced-by-force': 'replaced by another app',
};
const reasonText = (r) => REASON_TEXT[r] || r.replace(/-/g, ' ');

const SORTS = {
  name: (a, b) => a.name.localeCompare(b.name),
  state: (a, b) => (a.state || '').localeCompare(b.state || '') || a.name.localeCompare(b.name),
  owner: (a, b) => (a.owner || '').localeCompare(b.owner || '') || a.name.localeCompare(b.name),
  vram: (a, b) => ((b.usage && b.usage.memory) || 0) - ((a.usage && a.usage.memory) || 0) || a.name.localeCompare(b.name),
  recent: (a, b) => (b.updatedAt || 0) - (a.updatedAt || 0),
};
const FILTERS = {
  all: () => true,
  running: (a) => ACTIVE.has(a.state),
  stopped: (a) => !ACTIVE.has(a.state),
  assigned: (a) => (a.allocations || []).length > 0,
  waiting: (a) => a.reason === 'insufficient-resources',
};

/* A pull's layers and bytes as podman reports them (app.pull's layers and
 * bytes, issue 47 item 6): "1/2 layers, 18 Mi of 28 Mi (63 %)", the
 * layers alone when podman said no bytes, '' before its first layer. */
export function pullFigures(p) {
  const l = (p && p.layers) || {};
  const b = (p && p.bytes) || {};
  if (!l.total) return '';
  const layers = `${l.done}/${l.total} layer${l.total === 1 ? '' : 's'}`;
  if (!b.total) return layers;
  return `${layers}, ${gi(b.done)} of ${gi(b.total)} (${Math.floor(b.done * 100 / b.total)} %)`;
}

/* A container app's image and where its container is (docs/containers.md). */
export function containerText(c) {
  const p = c.pull || {};
  const figures = pullFigures(p);
  const where = p.state === 'pulling' ? `pulling the image${figures ? `: ${figures}` : p.progress ? `: ${p.progress}` : ''}`
    : p.state === 'failed' ? 'pull failed'
    : c.state === 'running' ? 'container running'
    : c.state === 'stopping' ? 'container stopping' : 'no container';
  return `Image ${c.image} · ${where}`;
}

function containerTitle(c) {
  const p = c.pull || {};
  return [c.digest && `pinned to ${c.digest}`, p.message || (p.state === 'pulling' && p.progress)].filter(Boolean).join('\n') || c.image;
}

/* How people attach their own containers to an external app (the app's
 * attach, GET /api/apps/NAME): the lines for each engine and compose tool
 * and the notes, the same as `accelctl app attach-help` prints. */
export function AttachDialog({ appName, onClose }) {
  const [at, setAt] = useState(null);
  const [err, setErr] = useState('');
  useEffect(() => {
    API.app(appName).then((a) => setAt(a.attach || {}), (x) => setErr(errText(x)));
  }, [appName]);
  return (
    <Modal title={`Attach your own containers to ${appName}`} onClose={onClose} wide ready={!!(at || err)}
      footer={<button class="btn" onClick={onClose}>Close</button>}>
      {err ? <p role="alert">{err}</p> : !at ? <div class="loading">Loading…</div> : (
        <div class="attach" data-testid="attach">
          {!at.admits && at.reason && <p class="muted" role="note">Refused now: {at.reason}</p>}
          {(at.ways || []).map((w) => (
            <div key={w.tool}><b>{w.tool}</b><pre class="attach-lines">{(w.lines || []).join('\n')}</pre></div>))}
          {(at.notes || []).length > 0 && <ul class="muted small">{at.notes.map((n) => <li key={n}>{n}</li>)}</ul>}
        </div>)}
    </Modal>
  );
}

const LOG_TAIL = 65536; /* the page shows the last 64 KiB of a log */

/* An app's output (GET /api/apps/NAME/logs): its last LOG_TAIL bytes,
 * read again on Refresh, as `accelctl app logs` prints it. */
export function LogsDialog({ appName, onClose }) {
  const [log, setLog] = useState(null);
  const [err, setErr] = useState('');
  const load = async () => {
    try {
      let r = await API.logs(appName, 0);
      if (r.size > LOG_TAIL) r = await API.logs(appName, r.size - LOG_TAIL);
      setLog(r); setErr('');
    } catch (x) { setErr(errText(x)); }
  };
  useEffect(() => { load(); }, [appName]);
  return (
    <Modal title={`Logs of ${appName}`} onClose={onClose} wide ready={!!(log || err)}
      footer={<><button class="btn" onClick={load}>Refresh</button><button class="btn" onClick={onClose}>Close</button></>}>
      {err ? <p role="alert">{err}</p> : !log ? <div class="loading">Loading…</div>
        : !log.text ? <p class="muted">Nothing written yet.</p>
        : <pre class="attach-lines app-log" data-testid="app-log">{log.size > LOG_TAIL ? '…\n' : ''}{log.text}</pre>}
    </Modal>
  );
}

/* A published port as a link: the address it is bound to, the page's
 * host for one bound to every address. */
function portLink(p) {
  const m = /^(?:(.*):)?(\d+):(\d+)(?:\/(\w+))?$/.exec(p);
  if (!m || (m[4] && m[4] !== 'tcp')) return null;
  const ip = !m[1] || m[1] === '0.0.0.0' || m[1] === '::' ? location.hostname : m[1];
  const host = ip.includes(':') ? `[${ip}]` : ip;
  return { href: `http://${host}:${m[2]}/`, text: `${host}:${m[2]}` };
}

export function AppsPage({ apps, nodes, role, refresh, offline }) {
  const [installing, setInstalling] = useState(false);
  const [attach, setAttach] = useState(null);
  const [logs, setLogs] = useState(null);
  const [resume, setResume] = useState(null);
  const [busy, setBusy] = useState('');
  const [q, setQ] = useState('');
  const [filter, setFilter] = useState('all');
  const [sort, setSort] = useState('name');
  const [all, setAll] = useState(false);
  const act = async (name, what, fn, done) => {
    setBusy(`${what}:${name}`);
    try { await fn(); toast(done); await refresh(); } catch (x) {
      if (x.check && (x.check.type === 'computeBindingRequired' || x.check.type === 'computeBindingUnavailable')) setResume(name);
      else toast(`${name}: ${errText(x)}`, 'error');
    } finally { setBusy(''); }
  };
  const uninstall = async (a) => {
    const ok = await confirmDialog({
      title: `Uninstall ${a.name}?`,
      body: <p>{a.name} will be stopped, its GPU resources released and the app deleted.</p>,
      ok: 'Uninstall', danger: true,
    });
    if (ok) act(a.name, 'uninstall', () => API.uninstall(a.name), `Uninstalling ${a.name}.`);
  };
  const mayAct = (a) => role === 'admin' || a.owner !== 'shared';
  const needle = q.trim().toLowerCase();
  const shown = (apps || []).filter((a) => FILTERS[filter](a) && (!needle
    || [a.name, a.title, a.owner, a.state].some((x) => x && String(x).toLowerCase().includes(needle))
    || (a.allocations || []).some((x) => `${x.nodeName} ${x.deviceId}`.toLowerCase().includes(needle))))
    .sort(SORTS[sort]);
  const external = (apps || []).filter((a) => a.external).length;
  return (
    <>
      <div class="page-head row">
        <div>
          <h1>Apps</h1>
          <p class="muted">{role === 'admin' ? 'All apps of the cluster.' : 'Your apps and the shared ones.'} Resume an app to choose the GPUs it runs on.</p>
        </div>
        <button class="btn primary" onClick={() => setInstalling(true)}>Install app</button>
      </div>
      {apps && apps.length > 0 && (
        <div class="toolbar" role="search" aria-label="Find apps">
          <label class="inline-field grow"><span>Search</span>
            <input type="search" value={q} placeholder="Name, owner, node…" aria-label="Search apps" onInput={(e) => setQ(e.currentTarget.value)} /></label>
          <label class="inline-field"><span>Show</span>
            <select value={filter} aria-label="Show" onChange={(e) => setFilter(e.currentTarget.value)}>
              <option value="all">All apps</option><option value="running">Running</option><option value="stopped">Not running</option>
              <option value="assigned">Holding a GPU</option><option value="waiting">Waiting for resources</option>
            </select></label>
          <label class="inline-field"><span>Sort</span>
            <select value={sort} aria-label="Sort by" onChange={(e) => setSort(e.currentTarget.value)}>
              <option value="name">Name</option><option value="state">State</option><option value="owner">Owner</option>
              <option value="vram">VRAM in use</option><option value="recent">Last change</option>
            </select></label>
          <span class="muted small" aria-live="polite" data-testid="app-count">{shown.length === apps.length ? `${apps.length} app${apps.length === 1 ? '' : 's'}` : `${shown.length} of ${apps.length} apps`}</span>
        </div>
      )}
      {external > 0 && <p class="muted small">{external === (apps || []).length ? 'These apps are' : `${external} of these apps, marked External, are`} <i>external</i>: accel assigns their GPUs, but another system (such as Olares) starts and stops their processes.</p>}
      {!apps ? <div class="loading">Loading…</div> : !apps.length ? <Empty title="No apps yet">Install one from its manifest file.</Empty> : !shown.length ? <Empty title="No app matches">Change the search or the filter.</Empty> : (
        <div class="card flush">
          <table class="table apps-table">
            <thead><tr><th>App</th><th>State</th><th>GPU</th><th>VRAM in use</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {(all ? shown : shown.slice(0, PAGE)).map((a) => (
                <tr key={a.name} data-app={a.name}>
                  <td data-label="App"><b>{a.title || a.name}</b>{a.title && a.title !== a.name && <div class="muted small">{a.name}</div>}
                    <div class="muted small">{a.owner === 'shared' ? 'shared app' : `owner ${a.owner}`}</div>
                    {a.external && <Badge kind="">External</Badge>}
                    {a.container && <div class="muted small ctr-line" title={containerTitle(a.container)}>{containerText(a.container)}</div>}
                    {a.container && a.container.pull && a.container.pull.state === 'pulling' && a.container.pull.bytes && a.container.pull.bytes.total > 0 &&
                      <progress class="pull-bar" max={a.container.pull.bytes.total} value={a.container.pull.bytes.done} aria-label={`Pull of ${a.name}'s image`} />}
                    {a.container && a.container.state === 'running' && (a.container.ports || []).map(portLink).filter(Boolean).map((l) =>
                      <a class="small port-link" key={l.href} href={l.href} target="_blank" rel="noopener">{l.text}</a>)}</td>
                  <td data-label="State">{offline ? <Badge kind="">Last seen {stateLabel(a.state).toLowerCase()}</Badge>
                    : a.external && a.state === 'running' ? <Badge kind="" title="accel assigned its GPU; another system runs its processes">Assigned</Badge>
                    : <Badge kind={STATE_KIND[a.state] || ''}>{stateLabel(a.state)}</Badge>}
                    {a.reason && <div class="muted small" title={a.reason}>{reasonText(a.reason)}</div>}
                    <div class="muted small">{timeAgo(a.updatedAt)}</div></td>
                  <td data-label="GPU"><div class="muted small">needs {needText(a)}</div><div class="apps-cell"><AllocText app={a} nodes={nodes} /></div></td>
                  <td data-label="VRAM in use">{!(a.allocations || []).length ? '—' : a.usage && measured(a.usage.memory) ? gi(a.usage.memory) : giOr(null)}
                    {elasticText(a) && <div class="muted small" data-testid="elastic">{elasticText(a)}</div>}</td>
                  <td class="actions-cell">{mayAct(a) ? <div class="actions">
                    {!ACTIVE.has(a.state) && a.state !== 'stopping' && a.state !== 'uninstalling' &&
                      <button class="btn small primary" onClick={() => setResume(a.name)} aria-label={`Resume ${a.name}`}>Resume</button>}
                    {ACTIVE.has(a.state) &&
                      <button class="btn small" disabled={busy === `stop:${a.name}`} aria-label={`Stop ${a.name}`}
                        onClick={() => act(a.name, 'stop', () => API.suspend(a.name), `Stopping ${a.name}; its GPU is released once its processes have exited.`)}>Stop</button>}
                    {(a.allocations || []).length > 0 &&
                      <button class="btn small danger-ghost" aria-label={`Remove from ${unitOf(a)}: ${a.name}`} onClick={() => removeAppFromGpu(a.name, refresh, unitOf(a))}>Remove from {unitOf(a)}</button>}
                    {a.runner && <button class="btn small" aria-label={`Logs of ${a.name}`} onClick={() => setLogs(a.name)}>Logs</button>}
                    {a.external && <button class="btn small" aria-label={`Attach containers to ${a.name}`} onClick={() => setAttach(a.name)}>Attach containers</button>}
                    <button class="btn small danger-ghost" aria-label={`Uninstall ${a.name}`} disabled={busy === `uninstall:${a.name}`} onClick={() => uninstall(a)}>Uninstall</button>
                  </div> : <span class="muted small">Managed by the administrator</span>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {!all && shown.length > PAGE && (
            <div class="more"><button class="btn" onClick={() => setAll(true)}>Show all {shown.length} apps</button>
              <span class="muted small">{PAGE} shown; search, filter or sort to find one.</span></div>)}
        </div>
      )}
      {logs && <LogsDialog appName={logs} onClose={() => setLogs(null)} />}
      {attach && <AttachDialog appName={attach} onClose={() => setAttach(null)} />}
      {installing && <InstallDialog onClose={() => setInstalling(false)} refresh={refresh} nodes={nodes} />}
      {resume && <ResumeDialog appName={resume} role={role} apps={apps} onClose={() => setResume(null)} refresh={refresh} />}
    </>
  );
}
