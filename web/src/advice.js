// One sentence per validation code (SPEC 2.6 / 7). The five sentences of
// SPEC 7 are given there word for word; the others are ours.
import { gi, giCeil, cores, hasVram } from './format.js';

export const ADVICE = {
  'device-vram-insufficient': 'This GPU does not have enough free VRAM. Remove apps from this GPU to free up VRAM first.',
  'total-vram-below-requirement': "This GPU's total VRAM is below the app's requirement. Removing apps will not help; select another GPU.",
  'aggregate-vram-insufficient': 'The selected GPUs do not have enough combined VRAM. Add more GPUs or pick another node.',
  'device-memory-insufficient': 'The node for this GPU does not have enough memory. Pick another GPU or node.',
  'node-pressure': 'Scheduling the app to this node would overload it. Retry later or pick another node.',
  'empty-selection': 'Select at least one GPU to launch the app on.',
  'node-not-found': 'This node no longer exists. Close the dialog and try again.',
  'device-not-found': 'This GPU no longer exists. Close the dialog and try again.',
  'too-many-selections': 'Too many GPUs are selected.',
  'duplicate-selection': 'The same GPU is selected twice.',
  'multi-card-not-supported': 'This app runs on a single card. Select only one GPU.',
  'multi-node-not-supported': 'This app cannot span nodes. Select GPUs of one node only.',
  'non-nvidia-must-single-selection': 'Only one device can be selected for this accelerator type.',
  'device-unhealthy': 'This GPU is reported unhealthy. Select another GPU.',
  'gpu-type-mismatch': "This device's type does not match the app's accelerator type.",
  'exclusive-already-bound': 'This GPU is in App exclusive mode and already assigned to another app. Remove that app first or pick another GPU.',
  'memory-required': 'Enter a VRAM quota for this GPU (it is in Memory slicing mode).',
  'memory-below-required': "The quota is below the app's minimum requirement.",
};

export function splitCode(code) {
  if (!code) return { base: '', subject: '' };
  const i = code.indexOf(':');
  return i < 0 ? { base: code, subject: '' } : { base: code.slice(0, i), subject: code.slice(i + 1) };
}

// Pressure lines "Memory: Total X Gi, Used Y Gi, Needed Z Gi" from the
// validation's detail, or built from its nodePressure dimensions.
export function pressureLines(v) {
  const dims = v && v.nodePressure && v.nodePressure.dimensions;
  if (dims && dims.length) {
    const lines = dims.filter((d) => d.pressured).map((d) => {
      const r = (d.resource || '').toLowerCase();
      const f = r === 'cpu' ? cores : giCeilOrFloor;
      const name = r === 'cpu' ? 'CPU' : r === 'disk' ? 'Disk' : 'Memory';
      return `${name}: Total ${f(d.capacity)}, Used ${f(d.used)}, Needed ${f(d.required)}`;
    });
    if (lines.length) return v.detail ? [v.detail] : lines;
  }
  return v && v.detail ? String(v.detail).split('\n') : [];
}
function giCeilOrFloor(b) { return gi(b); }

export function adviceFor(v, requirement) {
  if (!v || v.ok) return null;
  const { base, subject } = splitCode(v.code);
  let text = ADVICE[base] || v.reason || v.code;
  if (base === 'memory-below-required' && requirement) {
    const need = requirement.requiredGpu || requirement.requiredMemory;
    if (need) text = `The quota is below the app's minimum of ${giCeil(need)}.`;
  }
  const lines = base === 'node-pressure' ? pressureLines(v) : [];
  return { base, subject, code: v.code, text, lines };
}

// The seed's node-memory check spelled out with its numbers (SPEC 2.3):
//   required  = app requiredMemory (+ the card's VRAM in Time slicing)
//   available = node total × 90% − node used
//   shortfall = required − available
// so "Total 64, Used 22, Needed 40" does not read as if it fits.
export function pressureFormula(v, req, dev) {
  const dims = v && v.nodePressure && v.nodePressure.dimensions || [];
  const m = dims.find((d) => (d.resource || '').toLowerCase() === 'memory' && d.pressured);
  if (!m) return null;
  const appMem = (req && req.requiredMemory) || 0;
  const ts = dev && dev.supportType === 'TimeSlice' && hasVram(req && req.mode);
  const vram = ts ? dev.capacity || 0 : 0;
  const avail = Math.max(0, m.capacity * 0.9 - m.used);
  const lines = [];
  lines.push(vram && m.required === appMem + vram
    ? `Needed: the app's ${giCeil(appMem)} + this GPU's ${gi(vram)} of dedicated VRAM = ${giCeil(m.required)} (in Time slicing an app's VRAM is moved to system memory while another app has the GPU)`
    : `Needed: ${giCeil(m.required)}`);
  lines.push(`Available below the 90% threshold: ${gi(m.capacity)} × 90% − ${gi(m.used)} = ${gi(avail)}`);
  lines.push(`Short by ${giCeil(Math.max(0, m.required - avail))}`);
  return lines;
}
