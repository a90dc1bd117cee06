// Labels and number formats shared by every page.
const GI = 1024 ** 3;

export const SUPPORT_LABEL = {
  Exclusive: 'App exclusive',
  MemorySlice: 'Memory slicing',
  TimeSlice: 'Time slicing',
};
export const SUPPORT_DESC = {
  Exclusive: 'One app at a time gets the whole device.',
  MemorySlice: 'Each app gets a fixed memory quota on this device.',
  TimeSlice: 'Apps take turns on the whole device; each sees all of its memory.',
};
export const supportLabel = (s) => SUPPORT_LABEL[s] || s || '—';

export const TYPE_TITLE = {
  nvidia: 'NVIDIA GPU', 'nvidia-gb10': 'NVIDIA GB10', 'apple-m': 'Apple M-series', amd: 'AMD',
  intel: 'Intel', 'intel-gpu': 'Intel GPU', 'amd-gpu': 'AMD GPU', 'moore-soc': 'Moore Threads', cpu: 'CPU',
};
export const typeTitle = (t) => TYPE_TITLE[t] || t || '—';
export const VRAM_TYPES = new Set(['nvidia', 'intel-gpu', 'amd-gpu']);
export const hasVram = (t) => VRAM_TYPES.has(t);

function trim(n) {
  return n.toFixed(2).replace(/\.?0+$/, '');
}
const MI = 1024 ** 2;
// Below 1 Gi a size reads in whole Mi: 64 Mi, not 0.06 Gi beside 0.07 Gi
// (one figure floored, the other rounded up, on one row).
const small = (bytes, round) => (bytes > 0 && bytes < GI ? `${round(bytes / MI - (round === Math.floor ? -1e-6 : 1e-6))} Mi` : null);
// Bytes → "23.99 Gi", floored to two decimals (what a card really offers).
export function gi(bytes) {
  if (bytes == null || !isFinite(bytes)) return '—';
  return small(bytes, Math.floor) || `${trim(Math.floor(bytes / GI * 100 + 1e-6) / 100)} Gi`;
}
// Bytes → "8 Gi", rounded up to two decimals (what an app needs).
export function giCeil(bytes) {
  if (bytes == null || !isFinite(bytes)) return '—';
  return small(bytes, Math.ceil) || `${trim(Math.ceil(bytes / GI * 100 - 1e-6) / 100)} Gi`;
}
export const toGi = (bytes) => bytes / GI;
export const fromGi = (g) => Math.round(g * GI);
export const cores = (milli) => `${trim((milli || 0) / 1000)} Core`;

export function pct(part, whole) {
  if (!whole) return 0;
  return Math.max(0, Math.min(100, (part / whole) * 100));
}

// The requirement summary of the Resume dialog: type, card scope, need.
export function requirementSummary(req, scope) {
  if (!req) return '';
  const cards = scope === 'cross-node-cards' || req.supportMultiNodes ? 'multi-node'
    : scope === 'single-node-cards' || req.supportMultiCards ? 'multi-card' : 'single card';
  const need = hasVram(req.mode) ? req.requiredGpu : req.requiredMemory;
  return `${typeTitle(req.mode)}, ${cards}${need ? `, requires ${giCeil(need)}` : ''}`;
}

export const STATE_LABEL = {
  installed: 'Installed', resuming: 'Starting', running: 'Running', stopping: 'Stopping',
  stopped: 'Stopped', failed: 'Failed', uninstalling: 'Uninstalling', releasing: 'Releasing',
  unknown: 'Unknown (node unreachable)',
};
export const stateLabel = (s) => STATE_LABEL[s] || s || '—';

export function timeAgo(ms) {
  if (!ms) return '';
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return 'just now';
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(ms).toLocaleDateString();
}

// Figures a node cannot measure arrive as null (with a …Reason); they show
// "not reported", never 0 (SPEC 7, honest display).
export const NOT_REPORTED = 'not reported';
// "1 of the devices shown does not report …", "3 … do not report …"
export const notReporting = (n, what) => `${n} of the devices shown ${n === 1 ? 'does' : 'do'} not report ${what}.`;
export const measured = (v) => typeof v === 'number' && isFinite(v);
export const giOr = (bytes) => (measured(bytes) ? gi(bytes) : NOT_REPORTED);
export const pctOr = (v) => (measured(v) ? `${Math.round(v)}%` : NOT_REPORTED);
export function utilOf(d) {
  if (measured(d.utilization)) return d.utilization;
  if (d.usage && measured(d.usage.utilization)) return d.usage.utilization;
  return null;
}

// What a device is called: "GPU" for cards with dedicated VRAM, else "device".
export const devNoun = (mode) => (hasVram(mode) ? 'GPU' : 'device');

// Two identical GPUs on one node are told apart by index (SPEC 7): the label
// of every device, by id, rebuilt from each listing.
const labels = new Map();
export function setDeviceLabels(nodes) {
  labels.clear();
  for (const n of nodes || []) {
    const count = new Map();
    for (const d of n.devices || []) {
      const m = d.cardModel || typeTitle(d.mode);
      count.set(m, (count.get(m) || 0) + 1);
    }
    for (const d of n.devices || []) {
      const m = d.cardModel || typeTitle(d.mode);
      const dup = count.get(m) > 1;
      labels.set(d.id, dup ? `${m} #${d.index != null && d.index >= 0 ? d.index : d.id.slice(-4)}` : m);
    }
  }
}
// deviceLabel({id, cardModel, mode}) → "RTX 3090 #1" where needed.
export function deviceLabel(d) {
  const id = d.id || d.deviceId;
  return labels.get(id) || d.cardModel || typeTitle(d.mode) || id;
}
