// Elastic memory (SPEC 4.4, docs/elastic.md): a Memory-slicing GPU's
// overcommit and reclaim wait (Manage node), and what an app lent and got
// back (Apps), in words a home-lab user reads at a glance.
import { useState } from 'preact/hooks';
import { API } from './api.js';
import { toast, errText } from './ui.jsx';
import { gi, timeAgo } from './format.js';

// The device's Elastic memory settings; admins change them.
export function ElasticSettings({ d, isAdmin, refresh }) {
  const e = d.elastic || { overcommit: 1, reclaimWaitMs: 10000 };
  const [ratio, setRatio] = useState(String(e.overcommit));
  const [wait, setWait] = useState(String(e.reclaimWaitMs / 1000));
  const [busy, setBusy] = useState(false);
  const id = `elastic-${d.id}`;
  const on = e.overcommit > 1;
  const save = async () => {
    setBusy(true);
    try {
      const r = await API.setElastic(d.nodeName, d.id, {
        overcommit: Number(ratio), reclaimWaitMs: Math.round(Number(wait) * 1000) });
      const x = r && r.elastic;
      toast(x && x.overcommit > 1
        ? `Quotas on ${d.id} may now add up to ${gi(x.quotaCapacity)}; idle apps give memory back when another needs it.`
        : `Elastic memory is off on ${d.id}.`);
      await refresh();
    } catch (x) {
      toast(`Could not change elastic memory: ${errText(x)}`, 'error');
    } finally { setBusy(false); }
  };
  return (
    <div class="mode-field" data-focus-scope={id}>
      <label for={`${id}-ratio`}>Elastic memory</label>
      <p class="muted small">{on
        ? `Quotas may add up to ${gi(e.quotaCapacity)} (${e.overcommit} × the card). When an app needs memory the card lacks, idle apps that can give memory back are asked to, for up to ${e.reclaimWaitMs / 1000} s.`
        : 'Off: quotas add up to at most the card.'}</p>
      {isAdmin && (
        <div class="mode-row">
          <input id={`${id}-ratio`} type="number" min="1" max="4" step="0.1" value={ratio} disabled={busy}
            aria-label="Overcommit ratio (1 = off, at most 4)" onInput={(ev) => setRatio(ev.currentTarget.value)} />
          <label class="small" for={`${id}-wait`}>wait (s)</label>
          <input id={`${id}-wait`} type="number" min="0" max="600" step="1" value={wait} disabled={busy}
            aria-label="Reclaim wait in seconds" onInput={(ev) => setWait(ev.currentTarget.value)} />
          <button class="btn" onClick={save} disabled={busy}>Save</button>
        </div>
      )}
    </div>
  );
}

// One line on what an app lent or got back, or nothing.
export function elasticText(a) {
  const e = a && a.elastic;
  if (!e) return '';
  const parts = [];
  // another member's app is only "another user's app" (SPEC 3): its name is
  // "" with lastToHidden / lastFromHidden
  const other = (name, hidden) => (hidden ? "another user's app" : name);
  if (e.lent) parts.push(`gave back ${gi(e.lent.lastBytes)} to ${other(e.lent.lastTo, e.lent.lastToHidden)} ${timeAgo(e.lent.lastAt)}`);
  if (e.reclaimed) parts.push(`got ${gi(e.reclaimed.lastBytes)} from ${other(e.reclaimed.lastFrom, e.reclaimed.lastFromHidden)} ${timeAgo(e.reclaimed.lastAt)}`);
  if (!parts.length && e.reclaim) parts.push('gives memory back when asked');
  return parts.join('; ');
}
