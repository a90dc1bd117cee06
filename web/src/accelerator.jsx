// Settings > Accelerator: resource cards, and the Manage node page.
import { useState } from 'preact/hooks';
import { API } from './api.js';
import { Badge, Bar, Empty, confirmDialog, toast, errText, Modal } from './ui.jsx';
import { gi, hasVram, supportLabel, SUPPORT_DESC, typeTitle, cores, pct } from './format.js';

const SWITCH_WARNING = 'Switching modes stops all apps currently using this GPU and removes their assigned GPU resources.';
const RELEASE_NOTE = 'Resource release may take a short time.';

function enforcementText(d) {
  const e = d.enforcement || {};
  const mem = e.memory === 'shim' ? 'VRAM quota enforced' : 'VRAM quota not enforced';
  const cmp = e.compute === 'broker' ? 'time slices enforced' : null;
  return cmp ? `${mem}, ${cmp}` : mem;
}
function enforcementKind(d) {
  const e = d.enforcement || {};
  return e.memory === 'shim' || e.compute === 'broker' ? 'ok' : 'muted';
}

export function memoryLabel(d) {
  return hasVram(d.mode) ? 'Dedicated VRAM' : 'Memory (shares system RAM)';
}

export function removeAppFromGpu(appName, refresh) {
  return confirmDialog({
    title: `Remove ${appName}?`,
    body: <>
      <p>{appName} will be stopped and all of its assigned GPU resources released, on every GPU it uses.</p>
      <p class="note">{RELEASE_NOTE}</p>
    </>,
    ok: 'Remove', danger: true,
  }).then(async (yes) => {
    if (!yes) return false;
    try {
      await API.unbind(appName);
      toast(`${appName} removed from the GPU. ${RELEASE_NOTE}`);
      refresh && (await refresh());
      return true;
    } catch (e) {
      toast(`Could not remove ${appName}: ${errText(e)}`, 'error');
      return false;
    }
  });
}

function DeviceCard({ d }) {
  const used = d.usedMemory;
  const alloc = d.allocated || 0;
  const apps = d.bindings || [];
  return (
    <article class="card device" aria-label={`${d.cardModel || typeTitle(d.mode)} on ${d.nodeName}`} data-device={d.id}>
      <header class="card-head">
        <div>
          <h3>{d.cardModel || typeTitle(d.mode)}</h3>
          <div class="muted small">{d.nodeName} · {typeTitle(d.mode)}{d.index != null && hasVram(d.mode) ? ` #${d.index}` : ''}</div>
        </div>
        <Badge kind={d.health === 'no' ? 'bad' : 'good'}>{d.health === 'no' ? 'Unhealthy' : 'Healthy'}</Badge>
      </header>
      <dl class="facts">
        <div><dt>{memoryLabel(d)}</dt><dd>{gi(d.memory)}</dd></div>
        <div><dt>Sharing mode</dt><dd><Badge kind="mode">{supportLabel(d.supportType)}</Badge></dd></div>
        <div><dt>Assigned apps</dt><dd class="apps-cell">{apps.length ? apps.map((b) => (
          <span class="chip" key={b.appName + b.owner}>{b.appName}{b.memory ? ` · ${gi(b.memory)}` : ''}</span>)) : <span class="muted">None</span>}</dd></div>
        <div><dt>Enforcement</dt><dd><Badge kind={enforcementKind(d)}>{enforcementText(d)}</Badge></dd></div>
      </dl>
      <div class="usage">
        <div class="usage-row small">
          <span>{d.supportType === 'MemorySlice' ? 'Assigned' : 'In use'} {gi(d.supportType === 'MemorySlice' ? alloc : (used ?? 0))} of {gi(d.memory)}</span>
          {used != null && <span class="muted">live {gi(used)}</span>}
        </div>
        <Bar value={d.supportType === 'MemorySlice' ? alloc : (used ?? 0)} max={d.memory} second={d.supportType === 'MemorySlice' ? used : null}
          label={`VRAM use of ${d.cardModel || d.id}`} />
      </div>
      {d.foreignUsage && <p class="warn small" role="alert">A process outside accel is using this device.</p>}
    </article>
  );
}

export function AcceleratorPage({ nodes, role }) {
  if (!nodes) return <><PageHead /><div class="loading">Loading…</div></>;
  if (!nodes.length) return <><PageHead /><Empty title="No accelerator found">No node has reported a device yet.</Empty></>;
  return (
    <>
      <PageHead />
      {nodes.map((n) => (
        <section class="node-section" key={n.nodeName} aria-label={`Node ${n.nodeName}`}>
          <header class="section-head">
            <div>
              <h2>{n.nodeName}</h2>
              <div class="muted small">
                {(n.gpuTypes || []).map(typeTitle).join(', ')} · {n.devices.length} device{n.devices.length === 1 ? '' : 's'}
                {n.enabled === false && ' · accelerator management disabled'}
                {n.health === 'no' && ' · unhealthy'}
              </div>
            </div>
            <a class="btn" href={`#/accelerator/node/${encodeURIComponent(n.nodeName)}`} aria-label={`Manage ${n.nodeName}`}>Manage</a>
          </header>
          <div class="grid">
            {n.devices.map((d) => <DeviceCard d={d} key={d.id} />)}
          </div>
        </section>
      ))}
    </>
  );
}

function PageHead() {
  return (
    <div class="page-head">
      <h1>Accelerator</h1>
      <p class="muted">Every GPU and accelerator of the cluster, how it is shared and which apps use it.</p>
    </div>
  );
}

function NodeStats({ n }) {
  const row = (label, u, t, fmt) => (
    <div class="stat">
      <div class="stat-label">{label}</div>
      <div class="stat-value">{fmt(u)} <span class="muted">/ {fmt(t)}</span></div>
      <Bar value={u} max={t} label={`${label} use`} />
      <div class="muted small">{Math.round(pct(u, t))}% used</div>
    </div>
  );
  return (
    <div class="stats">
      {n.memory && row('Memory', n.memory.used, n.memory.total, gi)}
      {n.cpu && row('CPU', n.cpu.used, n.cpu.total, cores)}
      {n.disk && row('Disk', n.disk.used, n.disk.total, gi)}
    </div>
  );
}

function ModeSelect({ d, isAdmin, refresh }) {
  const [busy, setBusy] = useState(false);
  const [blocked, setBlocked] = useState(null);
  const [value, setValue] = useState(null);
  const modes = d.availableSupportTypes && d.availableSupportTypes.length ? d.availableSupportTypes : [d.supportType];
  const id = `mode-${d.id}`;
  const onChange = async (e) => {
    const next = e.currentTarget.value;
    if (next === d.supportType) return;
    setValue(next);
    const apps = (d.bindings || []).map((b) => b.appName);
    const ok = await confirmDialog({
      title: `Switch to ${supportLabel(next)}?`,
      body: <>
        <p class="warn-text">{SWITCH_WARNING}</p>
        {apps.length ? <>
          <p>These apps will be stopped:</p>
          <ul class="app-list">{apps.map((a) => <li key={a}><b>{a}</b></li>)}</ul>
          <p class="muted small">They stay stopped until you resume them with a new GPU selection.</p>
        </> : <p class="muted">No app is using this GPU now.</p>}
      </>,
      ok: 'Switch mode', danger: apps.length > 0,
    });
    if (!ok) { setValue(null); return; }
    setBusy(true);
    try {
      const r = await API.setSupportType(d.nodeName, d.id, next);
      const stopped = (r && r.stoppedApps || []).map((a) => a.appName);
      toast(`${d.cardModel || d.id} is now in ${supportLabel(next)} mode${stopped.length ? `; stopped ${stopped.join(', ')}` : ''}.`);
      await refresh();
    } catch (x) {
      if (x.check && x.check.type === 'computeDeviceSwitchBlocked') setBlocked(x.check);
      else toast(`Could not switch the mode: ${errText(x)}`, 'error');
    } finally { setBusy(false); setValue(null); }
  };
  return (
    <div class="mode-field">
      <label for={id}>Sharing mode</label>
      {isAdmin ? (
        <select id={id} value={value || d.supportType} onChange={onChange} disabled={busy || modes.length < 2}>
          {modes.map((m) => <option key={m} value={m}>{supportLabel(m)}</option>)}
        </select>
      ) : <div><Badge kind="mode">{supportLabel(d.supportType)}</Badge> <span class="muted small">Only an administrator can change it.</span></div>}
      <p class="muted small">{SUPPORT_DESC[value || d.supportType]}{modes.length < 2 ? ' This device offers no other mode.' : ''}</p>
      {blocked && (
        <Modal title="The mode was not switched" onClose={() => setBlocked(null)}
          footer={<button class="btn primary" onClick={() => setBlocked(null)}>OK</button>}>
          <p role="alert">These apps could not be stopped, so nothing was changed. Stop them yourself (or wait until they finish), then switch again.</p>
          <ul class="app-list">{(blocked.blockedApps || []).map((a) => (
            <li key={a.appName}><b>{a.appName}</b> <span class="muted">({a.owner}, {a.state}){BLOCK_REASON[a.reason] ? `: ${BLOCK_REASON[a.reason]}` : ''}</span></li>))}</ul>
          {(blocked.stoppedApps || []).length > 0 && (
            <p class="muted small">Stopped and released meanwhile: {blocked.stoppedApps.map((a) => a.appName).join(', ')}.</p>)}
        </Modal>
      )}
    </div>
  );
}

/* Why the daemon could not stop an app (blockedApps[].reason). */
const BLOCK_REASON = {
  'processes-still-on-device': 'already stopped, but its processes still use this GPU; it is released as soon as they are gone',
  'stop-operation-not-allowed': 'it is in the middle of another operation',
};

function GpuPanel({ d, isAdmin, refresh }) {
  const apps = d.bindings || [];
  return (
    <section class="card gpu-panel" aria-label={`GPU ${d.cardModel || d.id}`} data-device={d.id}>
      <header class="card-head">
        <div>
          <h3>{d.cardModel || typeTitle(d.mode)}</h3>
          <div class="muted small mono">{d.id}</div>
        </div>
        <Badge kind={d.health === 'no' ? 'bad' : 'good'}>{d.health === 'no' ? 'Unhealthy' : 'Healthy'}</Badge>
      </header>
      <dl class="facts two">
        <div><dt>Type</dt><dd>{typeTitle(d.mode)}</dd></div>
        <div><dt>{memoryLabel(d)}</dt><dd>{gi(d.memory)}</dd></div>
        <div><dt>Assigned</dt><dd>{d.supportType === 'MemorySlice' || !apps.length ? gi(d.allocated || 0) : 'Whole card'}</dd></div>
        <div><dt>Live use</dt><dd>{d.usedMemory != null ? gi(d.usedMemory) : '—'}</dd></div>
        <div><dt>Enforcement</dt><dd>{enforcementText(d)}</dd></div>
      </dl>
      <ModeSelect d={d} isAdmin={isAdmin} refresh={refresh} />
      <h4>Assigned apps</h4>
      {apps.length ? (
        <table class="table">
          <thead><tr><th>App</th><th>Owner</th><th>Quota</th><th><span class="sr-only">Actions</span></th></tr></thead>
          <tbody>
            {apps.map((b) => (
              <tr key={b.appName + b.owner}>
                <td><b>{b.appName}</b></td>
                <td>{b.owner}</td>
                <td>{b.memory ? gi(b.memory) : 'Whole card'}</td>
                <td class="right"><button class="btn small danger-ghost" aria-label={`Remove ${b.appName}`}
                  onClick={() => removeAppFromGpu(b.appName, refresh)}>Remove</button></td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : <p class="muted">No app is assigned to this GPU.</p>}
    </section>
  );
}

export function ManageNodePage({ nodes, nodeName, role, refresh }) {
  const n = nodes && nodes.find((x) => x.nodeName === nodeName);
  return (
    <>
      <div class="page-head">
        <a class="back" href="#/accelerator">← Accelerator</a>
        <h1>Manage node {nodeName}</h1>
        <p class="muted">Choose how each GPU is shared, and release apps from it.</p>
      </div>
      {!nodes ? <div class="loading">Loading…</div> : !n ? <Empty title="Node not found">There is no node named {nodeName}.</Empty> : (
        <>
          <NodeStats n={n} />
          <div class="grid wide">
            {n.devices.map((d) => <GpuPanel key={d.id} d={d} isAdmin={role === 'admin'} refresh={refresh} />)}
          </div>
        </>
      )}
    </>
  );
}
