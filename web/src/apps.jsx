// Apps: the list with state and owner; install from a manifest file;
// Resume (the dialog of resume.jsx), Stop, Remove from GPU, Uninstall.
import { useState, useRef } from 'preact/hooks';
import YAML from 'yaml';
import { API } from './api.js';
import { Badge, Empty, Modal, confirmDialog, toast, errText } from './ui.jsx';
import { gi, giCeil, stateLabel, typeTitle, hasVram, timeAgo } from './format.js';
import { ResumeDialog } from './resume.jsx';
import { removeAppFromGpu } from './accelerator.jsx';

const STATE_KIND = { running: 'good', resuming: 'info', stopping: 'info', failed: 'bad', uninstalling: 'info', releasing: 'info' };
const ACTIVE = new Set(['running', 'resuming']);

function needText(app) {
  const r = app.requirement || (app.requirements || [])[0];
  if (!r) return '—';
  const need = hasVram(r.mode) ? r.requiredGpu : r.requiredMemory;
  return `${typeTitle(r.mode)}${need ? ` · ${giCeil(need)}` : ''}`;
}

function AllocText({ app, nodes }) {
  const al = app.allocations || [];
  if (!al.length) return <span class="muted">Not assigned</span>;
  const model = (id) => {
    for (const n of nodes || []) for (const d of n.devices || []) if (d.id === id && d.cardModel) return d.cardModel.replace(/^NVIDIA GeForce /, '');
    return shortId(id);
  };
  return <>{al.map((a) => <span class="chip" key={a.deviceId} title={a.deviceId}>{model(a.deviceId)} · {a.nodeName}{a.memory ? ` · ${gi(a.memory)}` : ''}</span>)}</>;
}
const shortId = (id) => (id && id.length > 16 ? `${id.slice(0, 12)}…` : id);

export function parseManifestText(text, fileName) {
  const t = text.trim();
  if (!t) throw new Error('The file is empty.');
  if (/\.json$/i.test(fileName || '') || t.startsWith('{')) {
    try { return JSON.parse(t); } catch (e) { throw new Error(`The JSON is not valid: ${e.message}`); }
  }
  try {
    const v = YAML.parse(t);
    if (!v || typeof v !== 'object') throw new Error('the document is not a mapping');
    return v;
  } catch (e) { throw new Error(`The YAML is not valid: ${e.message}`); }
}

function InstallDialog({ onClose, refresh }) {
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
    try { setManifest(parseManifestText(await f.text(), f.name)); } catch (x) { setErr(x.message); }
  };
  const install = async () => {
    if (!manifest) return;
    setBusy(true); setErr('');
    try {
      const body = { manifest };
      if (chosen) body.selectedGpuType = chosen;
      const app = await API.install(body);
      const where = (app.allocations || []).map((a) => a.nodeName).filter((v, i, s) => s.indexOf(v) === i).join(', ');
      toast(`${app.name} installed${where ? ` on ${where}` : ''}${app.state ? ` (${stateLabel(app.state).toLowerCase()})` : ''}.`);
      await refresh();
      onClose();
    } catch (x) {
      if (x.check && x.check.type === 'computeModeSelect') {
        setModes(x.check.modes || []);
        const first = (x.check.modes || []).find((m) => m.status !== 'not_enough' && m.status !== 'unavailable');
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
        <button class="btn primary" onClick={install} disabled={!manifest || busy || (modes && !chosen)}>{busy ? 'Installing…' : 'Install'}</button>
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

export function AppsPage({ apps, nodes, role, refresh }) {
  const [installing, setInstalling] = useState(false);
  const [resume, setResume] = useState(null);
  const [busy, setBusy] = useState('');
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
    if (ok) act(a.name, 'uninstall', () => API.uninstall(a.name), `${a.name} uninstalled.`);
  };
  return (
    <>
      <div class="page-head row">
        <div>
          <h1>Apps</h1>
          <p class="muted">{role === 'admin' ? 'All apps of the cluster.' : 'Your apps.'} Resume an app to choose the GPUs it runs on.</p>
        </div>
        <button class="btn primary" onClick={() => setInstalling(true)}>Install app</button>
      </div>
      {!apps ? <div class="loading">Loading…</div> : !apps.length ? <Empty title="No apps yet">Install one from its manifest file.</Empty> : (
        <div class="card flush">
          <table class="table apps-table">
            <thead><tr><th>App</th><th>State</th><th>Owner</th><th>Needs</th><th>GPU</th><th>VRAM in use</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {apps.map((a) => (
                <tr key={a.name} data-app={a.name}>
                  <td><b>{a.title || a.name}</b>{a.title && a.title !== a.name && <div class="muted small">{a.name}</div>}
                    {a.external && <div class="muted small">external</div>}</td>
                  <td><Badge kind={STATE_KIND[a.state] || ''}>{stateLabel(a.state)}</Badge>
                    {a.reason && <div class="muted small" title={a.reason}>{a.reason.replace(/-/g, ' ')}</div>}
                    <div class="muted small">{timeAgo(a.updatedAt)}</div></td>
                  <td>{a.owner}</td>
                  <td>{needText(a)}</td>
                  <td><div class="apps-cell"><AllocText app={a} nodes={nodes} /></div></td>
                  <td>{a.usage && a.usage.memory != null ? gi(a.usage.memory) : '—'}</td>
                  <td><div class="actions">
                    {!ACTIVE.has(a.state) && a.state !== 'stopping' && a.state !== 'uninstalling' &&
                      <button class="btn small primary" onClick={() => setResume(a.name)} aria-label={`Resume ${a.name}`}>Resume</button>}
                    {ACTIVE.has(a.state) &&
                      <button class="btn small" disabled={busy === `stop:${a.name}`} aria-label={`Stop ${a.name}`}
                        onClick={() => act(a.name, 'stop', () => API.suspend(a.name), `${a.name} stopped.`)}>Stop</button>}
                    {(a.allocations || []).length > 0 &&
                      <button class="btn small danger-ghost" aria-label={`Remove ${a.name} from GPU`} onClick={() => removeAppFromGpu(a.name, refresh)}>Remove from GPU</button>}
                    <button class="btn small danger-ghost" aria-label={`Uninstall ${a.name}`} disabled={busy === `uninstall:${a.name}`} onClick={() => uninstall(a)}>Uninstall</button>
                  </div></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      {installing && <InstallDialog onClose={() => setInstalling(false)} refresh={refresh} />}
      {resume && <ResumeDialog appName={resume} app={(apps || []).find((x) => x.name === resume)} onClose={() => setResume(null)} refresh={refresh} />}
    </>
  );
}
