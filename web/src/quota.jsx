// A bound app's quota on a Memory slicing GPU, changed while it runs (SPEC
// 4.4): PUT /api/apps/{name}/compute-resources/bindings/{deviceId}. A raise
// must fit in what the other apps leave free (acceld checks it again and
// says why not); a cut takes effect at once, and an app that holds more
// than its new quota is refused new VRAM until it is under.
import { useState } from 'preact/hooks';
import { API } from './api.js';
import { Modal, toast, errText } from './ui.jsx';
import { gi } from './format.js';
import { ADVICE, splitCode } from './advice.js';
import { useOffline } from './offline.js';

const GI = 1024 ** 3;

export const QUOTA_LIVE = 'A quota changes while the app runs: a raise must fit in the VRAM the other apps leave free; a cut takes effect at once, and an app holding more than its new quota is refused new VRAM until it is under.';

// b: the binding ({appName, memory, usedMemory}), d: the device
export function QuotaDialog({ b, d, onClose, refresh }) {
  const offline = useOffline();
  const [value, setValue] = useState(String(Math.round((b.memory / GI) * 100) / 100));
  const [err, setErr] = useState('');
  const [busy, setBusy] = useState(false);
  // what this app may grow to: the card less what the others hold
  const others = Math.max(0, (d.allocated || 0) - (b.memory || 0));
  const most = Math.max(0, (d.memory || 0) - others);
  const gib = Number(value);
  const bytes = Math.round(gib * GI);
  const bad = value.trim() === '' || !isFinite(gib) || gib <= 0;
  const over = !bad && bytes > most;
  const holds = b.usedMemory || 0;
  const save = async () => {
    setBusy(true); setErr('');
    try {
      await API.setQuota(b.appName, d.id, bytes);
      toast(`${b.appName}'s quota on this GPU is now ${gi(bytes)}.`);
      await refresh();
      onClose();
    } catch (x) {
      const advice = ADVICE[splitCode(x.code).base];
      setErr(advice ? `${advice} (${errText(x)})` : errText(x));
    } finally { setBusy(false); }
  };
  return (
    <Modal title={`Change the quota of ${b.appName}`} onClose={onClose}
      footer={<>
        <button class="btn" onClick={onClose}>Cancel</button>
        <button class="btn primary" onClick={save} disabled={offline || busy || bad || over || bytes === b.memory}>{busy ? 'Saving…' : 'Save quota'}</button>
      </>}>
      <p class="muted small">Now {gi(b.memory)}{holds ? `, of which it holds ${gi(holds)}` : ''}. {QUOTA_LIVE}</p>
      <label for="quota-gi">New quota (Gi)</label>
      <input id="quota-gi" type="number" min="0.01" step="0.25" inputMode="decimal" value={value} data-autofocus
        aria-describedby="quota-note" onInput={(e) => setValue(e.currentTarget.value)} />
      <p id="quota-note" class={over || bad ? 'error small' : 'muted small'} role={over || bad ? 'alert' : undefined}>
        {bad ? 'Type a quota above 0 Gi.'
          : over ? `At most ${gi(most)} is free on this GPU for ${b.appName}.`
          : holds > bytes ? `${b.appName} holds ${gi(holds)} now: its new VRAM allocations are refused until it is under ${gi(bytes)}.`
          : `At most ${gi(most)} is free on this GPU for ${b.appName}.`}
      </p>
      {err && <p class="error" role="alert">{err}</p>}
    </Modal>
  );
}
