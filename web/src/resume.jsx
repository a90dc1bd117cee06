// The Resume dialog (SPEC 7): requirement summary, Select GPUs with quota and
// assigned apps, live validation with the advice sentence, and Launch.
import { useEffect, useRef, useState } from 'preact/hooks';
import { API } from './api.js';
import { Modal, Badge, toast, errText } from './ui.jsx';
import { gi, giCeil, toGi, fromGi, hasVram, requirementSummary, supportLabel, typeTitle } from './format.js';
import { adviceFor } from './advice.js';
import { removeAppFromGpu } from './accelerator.jsx';

const SCHED_REASON = {
  'no-matching-node': 'No node has an accelerator of this type.',
  'no-card-with-enough-vram': 'No single GPU has enough VRAM for this app.',
  'no-node-with-enough-cards': 'No node has enough GPUs to cover this app.',
  'insufficient-cluster-vram': 'The cluster does not have enough VRAM in total for this app.',
};
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
    </div>
  );
}

export function ResumeDialog({ appName, onClose, refresh }) {
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

  // live validation, debounced; stale answers are dropped
  useEffect(() => {
    if (!avail) return undefined;
    const b = binding();
    if (!b.length) { setVal(null); setChecking(false); return undefined; }
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
  const setQuota = (k, v, commit) => {
    setSel((s) => {
      if (!s[k]) return s;
      let q = v;
      const d = devOf(k);
      if (commit && d && v !== '' && isFinite(+v)) {
        const free = floor2(toGi(d.available || 0));
        const min = Math.ceil(toGi(need) * 100 - 1e-6) / 100;
        const cap = Math.max(free, min);
        if (+v > cap) q = String(cap);
        if (+v < 0) q = '0';
      }
      return { ...s, [k]: { ...s[k], quota: q } };
    });
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
  const placed = { dev: null, node: null };
  if (advice && advice.subject) {
    const hit = devices.find((d) => d.deviceId === advice.subject && sel[key(d.nodeName, d.deviceId)])
      || devices.find((d) => d.deviceId === advice.subject);
    if (hit) placed.dev = key(hit.nodeName, hit.deviceId);
    else if (avail && avail.nodes.some((n) => n.nodeName === advice.subject)) placed.node = advice.subject;
  }
  const general = advice && !placed.dev && !placed.node;
  const nsel = Object.keys(sel).length;

  return (
    <Modal title={`Resume ${appName}`} onClose={onClose} wide
      footer={<>
        <span class="foot-status muted small" aria-live="polite">
          {checking ? 'Checking…' : val && val.ok ? 'Ready to launch.' : nsel ? '' : multi ? 'Select one or more GPUs.' : 'Select a GPU.'}
        </span>
        <button class="btn" onClick={onClose}>Cancel</button>
        <button class="btn primary" onClick={launch} disabled={!val || !val.ok || checking || launching}>{launching ? 'Launching…' : 'Launch'}</button>
      </>}>
      {loadErr && <p class="error" role="alert">{loadErr}</p>}
      {!avail && !loadErr && <div class="loading">Loading…</div>}
      {avail && <>
        <div class="req-summary" data-testid="requirement-summary">{requirementSummary(req, avail.scope)}</div>
        {avail.schedulable === false && avail.reason &&
          <p class="note">{SCHED_REASON[avail.reason] || avail.reason}</p>}
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
                        <b>{d.cardModel || d.deviceId}</b>
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
                            <input type="number" inputMode="decimal" step="0.5" min="0" max={Math.max(free, Math.ceil(toGi(need) * 100) / 100)}
                              aria-label={`Quota for ${appName} on ${d.cardModel || d.deviceId} (Gi)`}
                              value={s ? s.quota : defaultQuota(d)} disabled={!s}
                              onInput={(e) => setQuota(k, e.currentTarget.value, false)}
                              onChange={(e) => setQuota(k, e.currentTarget.value, true)} /> Gi
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
                          {bindings.map((b) => (
                            <li key={b.appName + b.owner}>
                              <span><b>{b.appName}</b> <span class="muted small">{b.owner} · {b.memory ? gi(b.memory) : 'whole card'}
                                {b.spec && (b.spec.requiredGpu || b.spec.requiredMemory) ? ` · needs ${giCeil(vram ? b.spec.requiredGpu : b.spec.requiredMemory)}` : ''}</span></span>
                              <button class="btn small danger-ghost" aria-label={`Remove ${b.appName}`}
                                onClick={async () => { if (await removeAppFromGpu(b.appName, refresh)) { await load(); setSel((x) => ({ ...x })); } }}>Remove</button>
                            </li>
                          ))}
                        </ul>
                      ) : <p class="muted small">No app is assigned to this GPU.</p>)}
                    </div>
                    {placed.dev === k && <Advice a={advice} />}
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
