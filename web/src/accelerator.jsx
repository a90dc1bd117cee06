// Settings > Accelerator: resource cards, and the Manage node page (mode
// switch, assigned apps with Remove, the Select exclusive app picker).
import { useState } from 'preact/hooks';
import { API } from './api.js';
import { QuotaDialog, QUOTA_LIVE } from './quota.jsx';
import { ElasticSettings } from './elastic.jsx';
import { Badge, Bar, Empty, confirmDialog, toast, errText, Modal } from './ui.jsx';
import {
  gi, giCeil, giOr, hasVram, supportLabel, SUPPORT_DESC, typeTitle, cores, pct, measured, devNoun, deviceLabel, NOT_REPORTED,
} from './format.js';

const SWITCH_WARNING = 'Switching modes stops all apps currently using this GPU and removes their assigned GPU resources.';
const RELEASE_NOTE = 'Resource release may take a short time.';

export const HIDDEN_APP = "another user's app";

// What the node enforces on this device, said only where it matters to the
// mode in use: a quota only in Memory slicing, turns only in Time slicing.
export function enforcementNote(d) {
  const e = d.enforcement || {};
  const unit = hasVram(d.mode) ? 'VRAM' : 'Memory';
  if (d.supportType === 'MemorySlice') {
    // the node says what holds the quota and what it does not see
    // (memoryNote: HIP only, the shared RAM of a GB10, a cgroup alone);
    // the kernel's dmem or the driver's limits where they hold the apps
    if (e.memory === 'kernel' || e.memory === 'driver') {
      return { kind: 'ok', text: `${unit} quotas enforced by the ${e.memory === 'kernel' ? 'kernel (dmem)' : 'driver'}`, title: e.memoryNote || e.vramQuotas || '' };
    }
    if (e.memory === 'shim') {
      // vramQuotas: why neither the kernel nor the driver holds them here
      return { kind: 'ok', text: `${unit} quotas enforced`, title: [e.memoryNote || "accel's CUDA shim stops an app from allocating more than its quota.", e.vramQuotas].filter(Boolean).join(' ') };
    }
    if (e.memory === 'cgroup') {
      return { kind: 'warn', text: `${unit} quotas held by the app's memory limit only`, title: e.memoryNote || "Only the app's cgroup memory limit contains it; nothing intercepts this device's allocations." };
    }
    return { kind: 'warn', text: `${unit} quotas are not enforced on ${d.nodeName}`, title: e.memoryNote || 'Nothing on this node stops an app from using more than its quota: each app is trusted to stay within it.' };
  }
  if (d.supportType === 'TimeSlice') {
    return e.compute === 'broker'
      ? { kind: 'ok', text: 'Turns enforced', title: "accel's broker gives the device to one app at a time." }
      : { kind: 'warn', text: `Turns are not enforced on ${d.nodeName}`, title: 'No broker runs for this device: the apps share it as the driver schedules them.' };
  }
  if (e.memory === 'visible-devices') return { kind: 'ok', text: `Only the assigned app sees this ${devNoun(d.mode)}`, title: '' };
  return null;
}

export function memoryLabel(d) {
  return hasVram(d.mode) ? 'Dedicated VRAM' : 'Memory (shares system RAM)';
}

// Who may remove a binding (SPEC 3, 7): an admin any; a member only its own
// apps (the ones GET /api/apps lists with the binding's owner, not shared).
export function canRemove(b, role, apps) {
  if (!b || b.hidden || !b.appName) return false;
  if (role === 'admin') return true;
  return b.owner !== 'shared' && (apps || []).some((a) => a.name === b.appName && a.owner === b.owner);
}
export const bindingName = (b) => (b.hidden || !b.appName ? HIDDEN_APP : b.appName);

export function removeAppFromGpu(appName, refresh, noun = 'GPU') {
  return confirmDialog({
    title: `Remove ${appName}?`,
    body: <>
      <p>{appName} will be stopped and all of its assigned {noun} resources released, on every {noun} it uses.</p>
      <p class="note">{RELEASE_NOTE}</p>
    </>,
    ok: 'Remove', danger: true,
  }).then(async (yes) => {
    if (!yes) return false;
    try {
      await API.unbind(appName);
      toast(`${appName} removed from the ${noun}. ${RELEASE_NOTE}`);
      refresh && (await refresh());
      return true;
    } catch (e) {
      toast(`Could not remove ${appName}: ${errText(e)}`, 'error');
      return false;
    }
  });
}

function HealthBadge({ d, offline }) {
  if (offline) return <Badge kind="">Not updated</Badge>;
  return <Badge kind={d.health === 'no' ? 'bad' : 'good'}>{d.health === 'no' ? 'Unhealthy' : 'Healthy'}</Badge>;
}

function DeviceCard({ d, offline }) {
  const used = measured(d.usedMemory) ? d.usedMemory : null;
  const alloc = d.allocated || 0;
  const apps = d.bindings || [];
  const slice = d.supportType === 'MemorySlice';
  const enf = enforcementNote(d);
  const foreign = Array.isArray(d.foreignUsage) ? d.foreignUsage : [];
  const name = deviceLabel(d);
  return (
    <article class="card device" aria-label={`${name} on ${d.nodeName}`} data-device={d.id}>
      <header class="card-head">
        <div>
          <h3>{name}</h3>
          <div class="muted small">{d.nodeName} · {typeTitle(d.mode)}{d.index != null && d.index >= 0 && hasVram(d.mode) ? ` · index ${d.index}` : ''}</div>
        </div>
        <HealthBadge d={d} offline={offline} />
      </header>
      <dl class="facts">
        <div><dt>{memoryLabel(d)}</dt><dd>{gi(d.memory)}</dd></div>
        <div><dt>Sharing mode</dt><dd><Badge kind="mode">{supportLabel(d.supportType)}</Badge></dd></div>
        <div><dt>Assigned apps</dt><dd class="apps-cell">{apps.length ? apps.map((b, i) => (
          <span class={`chip${b.hidden ? ' hidden-app' : ''}`} key={`${b.appName}${b.owner}${i}`}>{bindingName(b)}{b.memory ? ` · ${gi(b.memory)}` : ''}</span>)) : <span class="muted">None</span>}</dd></div>
        {enf && <div><dt>Enforcement</dt><dd><Badge kind={enf.kind} title={enf.title}>{enf.text}</Badge></dd></div>}
      </dl>
      <div class="usage">
        <div class="usage-row small">
          {slice
            ? <span>Assigned {gi(alloc)} of {gi(d.memory)}</span>
            : <span>In use {used != null ? `${gi(used)} of ${gi(d.memory)}` : NOT_REPORTED}</span>}
          {slice && <span class="muted">in use {giOr(used)}</span>}
        </div>
        <Bar value={slice ? alloc : used} max={d.memory} second={slice ? used : null} label={`VRAM use of ${name}`} />
      </div>
      {foreign.length > 0 && (
        <p class="warn small" role="note">
          {foreign.length === 1 ? 'A process outside accel is' : `${foreign.length} processes outside accel are`} using this {devNoun(d.mode)}
          {foreign.some((f) => measured(f.usedMemory)) ? ` (${gi(foreign.reduce((s, f) => s + (f.usedMemory || 0), 0))})` : ''}.
          {foreign.filter((f) => f.container).map((f) => ` ${f.container.engine} container ${f.container.id.slice(0, 12)}, given the GPU past accel (--gpus or driver: nvidia).`).join('')}
        </p>
      )}
      {apps.filter((b) => b.overQuotaReported).map((b, i) => (
        <p class="warn small" role="note" key={`over${i}`}>
          {bindingName(b)}: over quota by {Math.round(b.overQuota / 1048576)} MiB: memory the shim cannot see.
        </p>
      ))}
    </article>
  );
}

export function AcceleratorPage({ nodes, offline }) {
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
                {[...(n.gpuTypes || []).map(typeTitle), `${n.devices.length} device${n.devices.length === 1 ? '' : 's'}`].join(' · ')}
                {n.enabled === false && ' · accelerator management disabled'}
                {n.reachable === false ? ' · unreachable: its acceld is not answering' : n.health === 'no' && ' · unhealthy'}
              </div>
            </div>
            <a class="btn" href={`#/accelerator/node/${encodeURIComponent(n.nodeName)}`} aria-label={`Manage ${n.nodeName}`}>Manage</a>
          </header>
          <div class="grid">
            {n.devices.map((d) => <DeviceCard d={d} key={d.id} offline={offline} />)}
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
      <div class="stat-value">{measured(u) ? fmt(u) : NOT_REPORTED} <span class="muted">/ {fmt(t)}</span></div>
      <Bar value={measured(u) ? u : null} max={t} label={`${label} use`} />
      <div class="muted small">{measured(u) ? `${Math.round(pct(u, t))}% used; apps are placed here up to 90%` : 'not reported by this node'}</div>
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

// The mode dropdown changes nothing by itself: a keyboard user moving
// through it with the arrow keys only picks a value; "Switch mode…" opens
// the warning (SPEC 7).
function ModeSelect({ d, isAdmin, refresh }) {
  const [busy, setBusy] = useState(false);
  const [blocked, setBlocked] = useState(null);
  const [value, setValue] = useState(null);
  const modes = d.availableSupportTypes && d.availableSupportTypes.length ? d.availableSupportTypes : [d.supportType];
  const id = `mode-${d.id}`;
  const pending = value && value !== d.supportType ? value : null;
  const apply = async () => {
    const next = pending;
    if (!next) return;
    const apps = (d.bindings || []).map(bindingName);
    const ok = await confirmDialog({
      title: `Switch to ${supportLabel(next)}?`,
      body: <>
        <p class="warn-text">{SWITCH_WARNING}</p>
        {apps.length ? <>
          <p>These apps will be stopped:</p>
          <ul class="app-list">{apps.map((a, i) => <li key={`${a}${i}`}><b>{a}</b></li>)}</ul>
          <p class="muted small">They stay stopped until you resume them with a new GPU selection.</p>
        </> : <p class="muted">No app is using this {devNoun(d.mode)} now.</p>}
      </>,
      ok: 'Switch mode', danger: apps.length > 0,
    });
    if (!ok) { setValue(null); return; }
    setBusy(true);
    try {
      const r = await API.setSupportType(d.nodeName, d.id, next);
      const stopped = (r && r.stoppedApps || []).map((a) => a.appName);
      toast(`${deviceLabel(d)} is now in ${supportLabel(next)} mode${stopped.length ? `; stopped ${stopped.join(', ')}` : ''}.`);
      setValue(null);
      await refresh();
    } catch (x) {
      setValue(null);
      if (x.check && x.check.type === 'computeDeviceSwitchBlocked') setBlocked(x.check);
      else toast(`Could not switch the mode: ${errText(x)}`, 'error');
    } finally { setBusy(false); }
  };
  return (
    <div class="mode-field" data-focus-scope={`mode-${d.id}`}>
      <label for={id}>Sharing mode</label>
      {isAdmin ? (
        <div class="mode-row">
          <select id={id} value={value || d.supportType} onChange={(e) => setValue(e.currentTarget.value)} disabled={busy || modes.length < 2}
            aria-describedby={`${id}-desc`}>
            {modes.map((m) => <option key={m} value={m}>{supportLabel(m)}</option>)}
          </select>
          {pending && <>
            <button class="btn primary" onClick={apply} disabled={busy}>Switch mode…</button>
            <button class="btn" onClick={() => setValue(null)} disabled={busy}>Keep {supportLabel(d.supportType)}</button>
          </>}
        </div>
      ) : <div><Badge kind="mode">{supportLabel(d.supportType)}</Badge> <span class="muted small">Only an administrator can change it.</span></div>}
      <p class="muted small" id={`${id}-desc`}>{SUPPORT_DESC[value || d.supportType]}{modes.length < 2 ? ' This device offers no other mode.' : ''}</p>
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

const needOf = (r) => (r ? (hasVram(r.mode) ? r.requiredGpu : r.requiredMemory) || 0 : 0);
const reqOf = (a, mode) => (a.requirements || [a.requirement]).filter(Boolean).find((r) => r.mode === mode) || null;

// Olares's "Select exclusive app" (SPEC 7): the apps that fit this GPU; one
// chosen gets it, replacing the holder after a confirm. A stopped app is
// resumed on this GPU; a running one is moved here (legacy bind, restart).
function ExclusivePicker({ d, apps, role, refresh }) {
  const [choice, setChoice] = useState('');
  const [busy, setBusy] = useState(false);
  const holder = (d.bindings || [])[0] || null;
  const noun = devNoun(d.mode);
  const candidates = (apps || []).filter((a) => {
    if (holder && !holder.hidden && a.name === holder.appName) return false;
    if (['uninstalling', 'stopping', 'releasing', 'resuming'].includes(a.state)) return false;
    if (role !== 'admin' && a.owner === 'shared') return false;
    const r = reqOf(a, d.mode);
    return r && needOf(r) <= (d.memory || 0) && !r.supportMultiCards;
  });
  const id = `excl-${d.id}`;
  const canReplace = !holder || canRemove(holder, role, apps);
  const bind = async () => {
    const a = candidates.find((x) => x.name === choice);
    if (!a) return;
    if (holder) {
      const ok = await confirmDialog({
        title: `Give this ${noun} to ${a.name}?`,
        body: <>
          <p>{bindingName(holder)} holds this {noun} in App exclusive mode. It will be stopped and its {noun} resources released, then {a.name} gets the {noun}.</p>
          <p class="note">{RELEASE_NOTE}</p>
        </>,
        ok: `Replace ${bindingName(holder)}`, danger: true,
      });
      if (!ok) return;
    }
    setBusy(true);
    try {
      if (a.state === 'running') await API.bindLegacy(d.id, a.name, !!holder);
      else {
        if (holder) await API.unbind(holder.appName);
        await API.resume(a.name, [{ nodeName: d.nodeName, deviceId: d.id }]);
      }
      toast(`${a.name} now has ${deviceLabel(d)} to itself.`);
      setChoice('');
      await refresh();
    } catch (x) {
      toast(`Could not give ${deviceLabel(d)} to ${a.name}: ${errText(x)}`, 'error');
    } finally { setBusy(false); }
  };
  return (
    <div class="excl-picker">
      <h3 class="h4">Select exclusive app</h3>
      <p class="muted small">One app at a time has this {noun} to itself. {holder ? <>Now: <b>{bindingName(holder)}</b>.</> : 'No app holds it now.'}</p>
      {!canReplace ? <p class="muted small">Only an administrator or the owner of {bindingName(holder)} can replace it.</p>
        : candidates.length ? (
          <div class="mode-row">
            <label class="sr-only" for={id}>Exclusive app for {deviceLabel(d)}</label>
            <select id={id} value={choice} onChange={(e) => setChoice(e.currentTarget.value)} disabled={busy}>
              <option value="">Choose an app…</option>
              {candidates.map((a) => <option key={a.name} value={a.name}>{a.title && a.title !== a.name ? `${a.title} (${a.name})` : a.name} · needs {giCeil(needOf(reqOf(a, d.mode)))}</option>)}
            </select>
            <button class="btn primary" onClick={bind} disabled={!choice || busy}>{holder ? 'Replace…' : 'Assign'}</button>
          </div>
        ) : <p class="muted small">No other app fits this {noun} (apps of type {typeTitle(d.mode)} needing at most {gi(d.memory)}).</p>}
    </div>
  );
}

// The time-slice settings (issue 49), each said in a sentence; the
// defaults are the ones the measurements chose (docs/internals/timeslice.md).
export const TIME_SLICE_SETTINGS = [
  { key: 'quantumMs', label: 'Turn length', unit: 'ms', min: 10, max: 600000, def: 30,
    help: 'How long an app may keep the GPU while another app waits, when no memory has to move between them.' },
  { key: 'idleReleaseUs', label: 'Idle release', unit: 'µs', min: 50, max: 600000000, def: 1000,
    help: 'An app that submits no work for this long (waiting for its own results counts as work) gives the GPU back early; it gets it back within a few milliseconds of asking.' },
  { key: 'oversubscribedQuantumMs', label: 'Shortest turn while memory moves', unit: 'ms', min: 10, max: 600000, def: 1000,
    help: "When the apps' memory together does not fit the GPU, each switch pages memory, so turns last at least this long (and longer when paging needs it)." },
  { key: 'revokeGraceMs', label: 'Revocation grace', unit: 'ms', min: 10, max: 600000, def: 1000,
    help: 'An app asked to give the GPU back that still holds it this long after loses its turn.' },
];

function TimeSliceSettings({ d, isAdmin, refresh }) {
  const ts = d.timeSlice || {};
  const now = (k) => (k === 'idleReleaseUs' && ts.idleReleaseUs == null && ts.idleReleaseMs != null ? ts.idleReleaseMs * 1000 : ts[k]);
  const [edit, setEdit] = useState({});
  const [busy, setBusy] = useState(false);
  const changed = Object.keys(edit).filter((k) => edit[k] !== '' && Number(edit[k]) !== now(k));
  const save = async () => {
    const body = {};
    for (const k of changed) body[k] = Number(edit[k]);
    setBusy(true);
    try {
      await API.setTimeSlice(d.nodeName, d.id, body);
      toast(`Time-slice settings of ${deviceLabel(d)} saved; the broker applies them within a second.`);
      setEdit({});
      await refresh();
    } catch (x) {
      toast(`Could not save the time-slice settings: ${errText(x)}`, 'error');
    } finally { setBusy(false); }
  };
  return (
    <div class="ts-settings" data-focus-scope={`ts-${d.id}`}>
      <h3 class="h4">Time-slice settings</h3>
      <dl class="facts">
        {TIME_SLICE_SETTINGS.map((f) => {
          const id = `ts-${f.key}-${d.id}`;
          const v = now(f.key);
          return (
            <div key={f.key}>
              <dt>{isAdmin ? <label for={id}>{f.label}</label> : f.label}</dt>
              <dd>
                {isAdmin
                  ? <><input id={id} type="number" min={f.min} max={f.max} step="1" value={edit[f.key] != null ? edit[f.key] : (v != null ? v : f.def)}
                      disabled={busy} onInput={(e) => setEdit({ ...edit, [f.key]: e.currentTarget.value })} /> {f.unit}</>
                  : <>{v != null ? v : f.def} {f.unit}</>}
                <p class="muted small">{f.help}</p>
              </dd>
            </div>
          );
        })}
      </dl>
      {ts.turnMs != null && ts.turnMs > 0 && <p class="muted small">Turn in force now: {Math.round(ts.turnMs)} ms{ts.turnMs > (ts.quantumMs || 0) ? ' (longer: memory moves at each switch)' : ''}.</p>}
      {isAdmin && <button class="btn primary" onClick={save} disabled={busy || !changed.length}>Save</button>}
    </div>
  );
}

function GpuPanel({ d, role, apps, refresh, offline }) {
  const isAdmin = role === 'admin';
  const [quota, setQuota] = useState(null);
  const bound = d.bindings || [];
  const slice = d.supportType === 'MemorySlice';
  const noun = devNoun(d.mode);
  const enf = enforcementNote(d);
  const name = deviceLabel(d);
  return (
    <section class="card gpu-panel" aria-label={`${noun === 'GPU' ? 'GPU' : 'Device'} ${name}`} data-device={d.id}>
      <header class="card-head">
        <div>
          <h2 class="h3">{name}</h2>
          <div class="muted small mono">{d.id}</div>
        </div>
        <HealthBadge d={d} offline={offline} />
      </header>
      <dl class="facts two">
        <div><dt>Type</dt><dd>{typeTitle(d.mode)}</dd></div>
        <div><dt>{memoryLabel(d)}</dt><dd>{gi(d.memory)}</dd></div>
        <div><dt>Assigned</dt><dd>{slice || !bound.length ? gi(d.allocated || 0) : 'Whole card'}</dd></div>
        <div><dt>In use now</dt><dd>{giOr(d.usedMemory)}</dd></div>
        {enf && <div class="span2"><dt>Enforcement</dt><dd title={enf.title}>{enf.text}. <span class="muted small">{enf.title}</span></dd></div>}
      </dl>
      <ModeSelect d={d} isAdmin={isAdmin} refresh={refresh} />
      {slice && d.elastic && <ElasticSettings d={d} isAdmin={isAdmin} refresh={refresh} />}
      {d.supportType === 'Exclusive' && <ExclusivePicker d={d} apps={apps} role={role} refresh={refresh} />}
      {d.supportType === 'TimeSlice' && <TimeSliceSettings d={d} isAdmin={isAdmin} refresh={refresh} />}
      <div data-focus-scope={`assigned-${d.id}`}>
      <h3 class="h4" tabIndex={-1} data-focus-home>Assigned apps</h3>
      {bound.length ? (
        <>
          <table class="table">
            <thead><tr><th>App</th><th>Owner</th><th>Quota</th><th><span class="sr-only">Actions</span></th></tr></thead>
            <tbody>
              {bound.map((b, i) => (
                <tr key={`${b.appName}${b.owner}${i}`}>
                  <td>{b.hidden ? <span class="muted">{HIDDEN_APP}</span> : <b>{b.appName}</b>}</td>
                  <td>{b.hidden ? '—' : b.owner}</td>
                  <td>{b.memory ? gi(b.memory) : 'Whole card'}</td>
                  <td class="right">{slice && b.memory > 0 && canRemove(b, role, apps) && <button class="btn small" aria-label={`Change the quota of ${b.appName}`}
                    disabled={offline} onClick={() => setQuota(b)}>Change quota</button>}
                    {canRemove(b, role, apps) && <button class="btn small danger-ghost" aria-label={`Remove ${b.appName}`}
                    onClick={() => removeAppFromGpu(b.appName, refresh, noun)}>Remove</button>}</td>
                </tr>
              ))}
            </tbody>
          </table>
          {slice && <p class="muted small quota-fixed">{QUOTA_LIVE}</p>}
          {quota && <QuotaDialog b={quota} d={d} onClose={() => setQuota(null)} refresh={refresh} />}
        </>
      ) : <p class="muted">No app is assigned to this {noun}.</p>}
      </div>
    </section>
  );
}

export function ManageNodePage({ nodes, nodeName, role, apps, refresh, offline }) {
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
            {n.devices.map((d) => <GpuPanel key={d.id} d={d} role={role} apps={apps} refresh={refresh} offline={offline} />)}
          </div>
        </>
      )}
    </>
  );
}
