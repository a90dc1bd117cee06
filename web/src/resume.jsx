// The Resume dialog (SPEC 7): requirement summary, Select GPUs with quota and
// assigned apps, live validation with the advice sentence, and Launch.
import { useEffect, useRef, useState } from 'preact/hooks';
import { API } from './api.js';
import { Modal, Badge, toast, errText } from './ui.jsx';
import { gi, giCeil, toGi, fromGi, hasVram, requirementSummary, supportLabel, typeTitle, deviceLabel, devNoun } from './format.js';
import { adviceFor, pressureFormula } from './advice.js';
import { removeAppFromGpu, canRemove, bindingName } from './accelerator.jsx';
import { useOffline } from './offline.js';

// The sentence above the GPU list names the real reason the app cannot be
// placed now (SPEC 7): the daemon's schedulable reason speaks of sizes only,
// so a card that is large enough but taken, or on a busy node, is told apart.
export function summaryReason(avail) {
  if (!avail || avail.schedulable !== false) return '';
  const req = avail.requirement || {};
  const vram = hasVram(req.mode);
  const noun = devNoun(req.mode);
  const unit = vram ? 'VRAM' : 'memory';
  const need = (vram ? req.requiredGpu : req.requiredMemory) || 0;
  const nodes = avail.nodes || [];
  const devs = nodes.flatMap((n) => (n.devices || []).map((d) => ({ ...d, node: n })));
  if (!devs.length) return `No node has a ${typeTitle(req.mode)}.`;
  const healthy = devs.filter((d) => d.health !== 'no');
  if (!healthy.length) return `Every ${typeTitle(req.mode)} is reported unhealthy.`;
  const multi = avail.scope !== 'card';
  const big = healthy.filter((d) => (d.capacity || 0) >= need);
  if (!multi && !big.length) {
    const max = Math.max(...healthy.map((d) => d.capacity || 0));
    return `No single ${noun} has enough ${unit} for this app: it needs ${giCeil(need)}, the largest has ${gi(max)}.`;
  }
  if (multi && avail.reason === 'insufficient-cluster-vram') return `The cluster does not have enough ${unit} in total for this app (it needs ${giCeil(need)}).`;
  if (multi && avail.reason === 'no-node-with-enough-cards') return `No node has enough ${noun}s to cover this app (it needs ${giCeil(need)}).`;
  const pool = multi ? healthy : big;
  const held = pool.filter((d) => d.supportType === 'Exclusive' && (d.bindings || []).length);
  const roomy = pool.filter((d) => (d.available || 0) >= need);
  const busyNodes = [...new Set(pool.filter((d) => (d.available || 0) >= need && d.node.status === 'not_available').map((d) => d.node.nodeName))];
  if (busyNodes.length && roomy.every((d) => busyNodes.includes(d.node.nodeName))) {
    return `The ${noun}s with room for this app are on ${busyNodes.length === 1 ? `node ${busyNodes[0]}, which is` : `nodes ${busyNodes.join(', ')}, which are`} too busy now (memory, CPU or disk above the 90% threshold). Retry later or free resources there.`;
  }
  if (held.length === pool.length) return `Every ${noun} large enough is in App exclusive mode and held by another app. Remove that app or pick another ${noun}.`;
  return `Every ${noun} large enough has too much ${unit} assigned to other apps. Remove apps from a ${noun} to free up ${unit} first.`;
}

// The quota of a Memory slicing selection, checked here before it is sent
// (SPEC 7): empty or not a number, below the app's minimum, above the free
// quota. Returns the sentence, or '' when it is fine.
export function quotaProblem(q, freeGi, minGi) {
  if (q == null || String(q).trim() === '') return 'Enter a VRAM quota for this GPU (it is in Memory slicing mode).';
  const v = Number(q);
  if (!isFinite(v) || v <= 0) return 'The quota must be a number of Gi above 0.';
  // above the free quota while the minimum would fit: say how much is free;
  // when even the minimum does not fit, the daemon's device-vram-insufficient
  // advice (remove apps) is the right one
  if (v > freeGi + 1e-9 && freeGi >= (minGi || 0)) return `At most ${freeGi} Gi is free on this GPU.`;
  if (minGi && v < minGi - 1e-9) return `The quota is below the app's minimum of ${minGi} Gi.`;
  return '';
}
const NODE_STATUS = {
  available: ['Available', 'good'],
  not_available: ['Not enough free resources', 'warn'],
  not_enough: ['Not enough resources', 'bad'],
};

const key = (n, d) => `${n}\u0000${d}`;
const floor2 = (x) => Math.floor(x * 100 + 1e-6) / 100;

function Advice({ a }) {
  return (
    <div class="advice" role="alert" data-code={a.base}>
      <p>{a.text}</p>
      {a.lines.map((l) => <p class="detail" key={l}>{l}</p>)}
      {a.formula && <ul class="formula">{a.formula.map((l) => <li key={l}>{l}</li>)}</ul>}
    </div>
  );
}

export function ResumeDialog({ appName, onClose, refresh, role, apps }) {
  const offline = useOffline();
  const [avail, setAvail] = useState(null);
  const [loadErr, setLoadErr] = useState('');
  const [sel, setSel] = useState({}); // key → {nodeName, deviceId, quota (Gi, string)}
  const [val, setVal] = useState(null);
  const [checking, setChecking] = useState(false);
  const [open, setOpen] = useState({});
  const [launching, setLaunching] = useState(false);
  const [launchErr, setLaunchErr] = useState('');
  const seq = useRef(0);

  const load = async () => {
    try { setAvail(await API.availability(appName)); setLoadErr(''); } catch (e) { setLoadErr(errText(e)); }
  };
  useEffect(() => { load(); }, [appName]);

  const req = avail && avail.requirement || {};
  const vram = hasVram(req.mode);
  const need = (vram ? req.requiredGpu : req.requiredMemory) || 0;
  const multi = avail && avail.scope !== 'card';
  const devices = avail ? avail.nodes.flatMap((n) => n.devices.map((d) => ({ ...d, nodeName: d.nodeName || n.nodeName }))) : [];
  const devOf = (k) => devices.find((d) => key(d.nodeName, d.deviceId) === k);

  const binding = () => Object.entries(sel).map(([k, s]) => {
    const d = devOf(k);
    const item = { nodeName: s.nodeName, deviceId: s.deviceId };
    if (d && d.supportType === 'MemorySlice' && s.quota !== '' && s.quota != null && isFinite(+s.quota)) item.memory = fromGi(+s.quota);
    return item;
  });

  const minGi = Math.ceil(toGi(need) * 100 - 1e-6) / 100;
  const problems = {};
  for (const [k, s] of Object.entries(sel)) {
    const d = devOf(k);
    if (d && d.supportType === 'MemorySlice') {
      const p = quotaProblem(s.quota, floor2(toGi(d.available || 0)), multi ? 0 : minGi);
      if (p) problems[k] = p;
    }
  }
  const local = Object.keys(problems).length > 0;

  // live validation, debounced; stale answers are dropped
  useEffect(() => {
    if (!avail) return undefined;
    const b = binding();
    if (!b.length || local) { ++seq.current; setVal(null); setChecking(false); return undefined; }
    const my = ++seq.current;
    setChecking(true);
    const t = setTimeout(async () => {
      try {
        const r = await API.validate(appName, b);
        if (my !== seq.current) return;
        setVal(r.validation || { ok: r.status === 'valid', code: r.status });
      } catch (e) {
        if (my !== seq.current) return;
        if (e.check && e.check.validation) setVal(e.check.validation);
        else setVal({ ok: false, code: '', reason: errText(e) });
      } finally { if (my === seq.current) setChecking(false); }
    }, 200);
    return () => clearTimeout(t);
  }, [sel, avail]);

  const defaultQuota = (d) => {
    const free = floor2(toGi(d.available || 0));
    const min = Math.ceil(toGi(need) * 100 - 1e-6) / 100;
    if (!need) return String(free);
    return String(multi ? Math.min(min, free) : min);
  };
  const toggle = (d) => {
    const k = key(d.nodeName, d.deviceId);
    setLaunchErr('');
    setSel((s) => {
      if (s[k]) { const n = { ...s }; delete n[k]; return n; }
      const item = { nodeName: d.nodeName, deviceId: d.deviceId, quota: defaultQuota(d) };
      return multi ? { ...s, [k]: item } : { [k]: item };
    });
  };
  // what is typed stays as typed: a quota above the free VRAM is explained,
  // never silently changed (SPEC 7)
  const setQuota = (k, v) => {
    setSel((s) => (s[k] ? { ...s, [k]: { ...s[k], quota: v } } : s));
  };

  const launch = async () => {
    setLaunching(true); setLaunchErr('');
    try {
      await API.resume(appName, binding());
      toast(`Launching ${appName}.`);
      await refresh();
      onClose();
    } catch (e) {
      if (e.check && e.check.validation) {
        setVal(e.check.validation);
        if (e.check.availability) setAvail(e.check.availability);
      } else setLaunchErr(errText(e));
    } finally { setLaunching(false); }
  };

  const advice = val && !val.ok ? adviceFor(val, req) : null;
  // the advice goes under the device it names; a node's (pressure) under
  // the selected device of that node, where the user is looking
  const placed = { dev: null, node: null };
  if (advice && advice.subject) {
    const hit = devices.find((d) => d.deviceId === advice.subject && sel[key(d.nodeName, d.deviceId)])
      || devices.find((d) => d.deviceId === advice.subject);
    if (hit) placed.dev = key(hit.nodeName, hit.deviceId);
    else if (avail && avail.nodes.some((n) => n.nodeName === advice.subject)) {
      const chosen = Object.keys(sel).find((k) => sel[k].nodeName === advice.subject);
      if (chosen) placed.dev = chosen; else placed.node = advice.subject;
    }
  }
  if (advice && advice.base === 'node-pressure' && placed.dev) {
    const d = devOf(placed.dev);
    advice.formula = pressureFormula(val, req, d);
  }
  const general = advice && !placed.dev && !placed.node;
  const nsel = Object.keys(sel).length;
  const status = checking ? 'Checking…' : local ? 'Fix the quota to launch.' : val && val.ok ? 'Ready to launch.'
    : val ? 'This selection cannot launch.' : nsel ? '' : multi ? 'Select one or more GPUs.' : 'Select a GPU.';
  const reason = summaryReason(avail);

  return (
    <Modal title={`Resume ${appName}`} onClose={onClose} wide ready={!!avail || !!loadErr}
      footer={<>
        <span class="foot-status muted small" aria-live="polite">{status}</span>
        <span class="foot-buttons">
          <button class="btn" onClick={onClose}>Cancel</button>
          <button class="btn primary" onClick={launch} disabled={offline || local || !val || !val.ok || checking || launching}>{launching ? 'Launching…' : 'Launch'}</button>
        </span>
      </>}>
      {loadErr && <p class="error" role="alert">{loadErr}</p>}
      {!avail && !loadErr && <div class="loading">Loading…</div>}
      {avail && <>
        <div class="req-summary" data-testid="requirement-summary">{requirementSummary(req, avail.scope)}</div>
        {reason && <p class="note" data-testid="summary-reason">{reason}</p>}
        <h3 class="sub">Select GPUs</h3>
        {!avail.nodes.length && <p class="muted">No node has a device of type {typeTitle(req.mode)}.</p>}
        {avail.nodes.map((n) => {
          const [label, kind] = NODE_STATUS[n.status] || [n.status, ''];
          return (
            <div class="node-group" key={n.nodeName} aria-label={`Node ${n.nodeName}`}>
              <div class="node-group-head"><b>{n.nodeName}</b> <Badge kind={kind}>{label}</Badge></div>
              {placed.node === n.nodeName && <Advice a={advice} />}
              {n.devices.map((d) => {
                const k = key(d.nodeName || n.nodeName, d.deviceId);
                const s = sel[k];
                const bindings = d.bindings || [];
                const inputId = `pick-${k.replace(/[^a-zA-Z0-9]/g, '-')}`;
                const free = floor2(toGi(d.available || 0));
                return (
                  <div class={`pick${s ? ' selected' : ''}`} key={k} data-device={d.deviceId}>
                    <div class="pick-main">
                      <input id={inputId} type={multi ? 'checkbox' : 'radio'} name="resume-gpu" checked={!!s}
                        onClick={() => toggle({ ...d, nodeName: d.nodeName || n.nodeName })} onChange={() => {}}
                        disabled={d.health === 'no'} />
                      <label for={inputId} class="pick-title">
                        <b>{deviceLabel(d)}</b>
                        <span class="muted small mono">{d.deviceId}</span>
                      </label>
                    </div>
                    <dl class="facts pick-facts">
                      <div><dt>{vram ? 'Dedicated VRAM' : 'Memory'}</dt><dd>{gi(d.capacity)}</dd></div>
                      <div><dt>Sharing mode</dt><dd>{supportLabel(d.supportType)}</dd></div>
                      <div><dt>Free</dt><dd>{gi(d.available)}</dd></div>
                      <div><dt>Quota for current app</dt><dd>
                        {d.supportType === 'MemorySlice' ? (
                          <span class="quota">
                            <input type="number" inputMode="decimal" step="0.5" min="0"
                              aria-label={`Quota for ${appName} on ${deviceLabel(d)} (Gi)`}
                              aria-invalid={problems[k] ? 'true' : undefined} aria-describedby={problems[k] ? `${inputId}-err` : undefined}
                              value={s ? s.quota : defaultQuota(d)} disabled={!s}
                              onInput={(e) => setQuota(k, e.currentTarget.value)} /> Gi
                          </span>
                        ) : <span title="Fixed in this mode">Whole card ({gi(d.capacity)})</span>}
                      </dd></div>
                    </dl>
                    <div class="assigned">
                      <button class="link" aria-expanded={!!open[k]} onClick={() => setOpen((o) => ({ ...o, [k]: !o[k] }))}>
                        Assigned apps ({bindings.length}) {open[k] ? '▾' : '▸'}
                      </button>
                      {open[k] && (bindings.length ? (
                        <ul class="assigned-list">
                          {bindings.map((b, i) => (
                            <li key={`${b.appName}${b.owner}${i}`}>
                              <span><b>{bindingName(b)}</b> <span class="muted small">{b.hidden ? '' : `${b.owner} · `}{b.memory ? gi(b.memory) : 'whole card'}
                                {b.spec && (b.spec.requiredGpu || b.spec.requiredMemory) ? ` · needs ${giCeil(vram ? b.spec.requiredGpu : b.spec.requiredMemory)}` : ''}</span></span>
                              {canRemove(b, role, apps) && <button class="btn small danger-ghost" aria-label={`Remove ${b.appName}`}
                                onClick={async () => { if (await removeAppFromGpu(b.appName, refresh)) { await load(); setSel((x) => ({ ...x })); } }}>Remove</button>}
                            </li>
                          ))}
                        </ul>
                      ) : <p class="muted small">No app is assigned to this {devNoun(req.mode)}.</p>)}
                    </div>
                    {problems[k] && <div class="advice" role="alert" id={`${inputId}-err`} data-code="quota"><p>{problems[k]}</p></div>}
                    {!problems[k] && placed.dev === k && <Advice a={advice} />}
                  </div>
                );
              })}
            </div>
          );
        })}
        {general && <Advice a={advice} />}
        {launchErr && <p class="error" role="alert">{launchErr}</p>}
      </>}
    </Modal>
  );
}
