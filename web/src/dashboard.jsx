// Dashboard: GPU utilization and VRAM over time, per device and per app, for
// the whole cluster or one node (SPEC 7). The history comes from acceld
// (GET /api/metrics/history), so a reload or a new visitor sees the last day
// at once. Where a daemon does not keep history yet (404), the page falls
// back to the samples of its own polls since it was opened, and says so.
// Many devices stay readable: a top-N by peak (or the devices picked by
// hand), distinct colours and dash patterns, and the cluster on its own chart.
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import { API } from './api.js';
import { gi, toGi, typeTitle, stateLabel, measured, utilOf, giOr, pctOr, deviceLabel, notReporting } from './format.js';
import { Empty } from './ui.jsx';
import { elasticText } from './elastic.jsx';

// ---- the page's own samples (fallback only) ----
const MAX = 1200; // an hour at one per 3 s
const local = { t: [], dev: new Map(), app: new Map() };

function push(map, id, meta, value) {
  let s = map.get(id);
  if (!s) { s = { ...meta, v: new Array(local.t.length - 1).fill(null) }; map.set(id, s); }
  Object.assign(s, meta);
  s.v.push(value);
}
export function recordSample(nodes, apps) {
  local.t.push(Math.floor(Date.now() / 1000));
  const seenD = new Set(); const seenA = new Set();
  for (const n of nodes) {
    for (const d of n.devices || []) {
      seenD.add(d.id);
      push(local.dev, d.id, { id: d.id, nodeName: n.nodeName, index: d.index, model: d.cardModel || typeTitle(d.mode), memoryTotal: d.memory },
        { used: measured(d.usedMemory) ? d.usedMemory : null, util: utilOf(d) });
    }
  }
  for (const a of apps) {
    seenA.add(a.name);
    push(local.app, a.name, { name: a.name, owner: a.owner, deviceIds: (a.allocations || []).map((x) => x.deviceId) },
      { used: a.usage && measured(a.usage.memory) ? a.usage.memory : null });
  }
  for (const [id, s] of local.dev) if (!seenD.has(id)) s.v.push(null);
  for (const [id, s] of local.app) if (!seenA.has(id)) s.v.push(null);
  if (local.t.length > MAX) {
    const cut = local.t.length - MAX;
    local.t.splice(0, cut);
    for (const s of local.dev.values()) s.v.splice(0, cut);
    for (const s of local.app.values()) s.v.splice(0, cut);
  }
}
function localHistory(range) {
  const end = Math.floor(Date.now() / 1000);
  const from = local.t.findIndex((t) => t >= end - range);
  const i0 = from < 0 ? local.t.length : from;
  return {
    start: end - range, end, step: 3, timestamps: local.t.slice(i0),
    devices: [...local.dev.values()].map((s) => ({ ...s, utilization: s.v.slice(i0).map((x) => (x ? x.util : null)), memoryUsed: s.v.slice(i0).map((x) => (x ? x.used : null)) })),
    apps: [...local.app.values()].map((s) => ({ ...s, memoryUsed: s.v.slice(i0).map((x) => (x ? x.used : null)) })),
  };
}

// Exclusive and Time slicing bind the whole card: count it as assigned.
export const assignedOf = (d) => (d.supportType === 'MemorySlice' ? d.allocated || 0 : (d.bindings || []).length ? d.memory || 0 : 0);

// 12 colours far apart (and readable on white), then dash patterns.
const COLORS = ['#1f5bd8', '#d9480f', '#2b8a3e', '#9c36b5', '#0b7285', '#c2255c', '#5f3dc4', '#8f6a00', '#e8590c', '#364fc7', '#087f5b', '#862e9c'];
const DASHES = [undefined, [6, 4], [2, 3], [10, 3, 2, 3]];
export const styleOf = (i) => ({ stroke: COLORS[i % COLORS.length], dash: DASHES[Math.floor(i / COLORS.length) % DASHES.length] });

const RANGES = [[300, 'Last 5 minutes'], [900, 'Last 15 minutes'], [3600, 'Last hour'], [6 * 3600, 'Last 6 hours'], [86400, 'Last 24 hours']];
const TOPS = [5, 8, 12, 0];
const PREF_KEY = 'accel.dashboard';
function loadPrefs() {
  try { return { range: 3600, top: 8, node: '', picked: [], ...JSON.parse(localStorage.getItem(PREF_KEY) || '{}') }; } catch { return { range: 3600, top: 8, node: '', picked: [] }; }
}
function savePrefs(p) { try { localStorage.setItem(PREF_KEY, JSON.stringify(p)); } catch { /* private mode */ } }

const peak = (arr) => arr.reduce((m, v) => (v != null && v > m ? v : m), -1);

function Chart({ title, series, unit, yMax, empty, id, x, note }) {
  const host = useRef(null);
  const plot = useRef(null);
  const sig = `${series.map((s) => s.label).join('|')}:${x.start}:${x.end - x.start}`;
  useEffect(() => {
    if (!host.current || !series.length) return undefined;
    const width = Math.max(260, host.current.clientWidth);
    const opts = {
      width, height: 220,
      scales: {
        x: { time: true, range: () => [x.start, Math.max(x.end, x.start + 60)] },
        y: yMax ? { range: [0, yMax] } : { range: (u, min, max) => [0, Math.max(1, (max || 0) * 1.15)] },
      },
      axes: [{ stroke: '#4b5563', grid: { stroke: '#eef0f4' } },
        { stroke: '#4b5563', grid: { stroke: '#eef0f4' }, size: 60, values: (u, vals) => vals.map((v) => `${+v.toFixed(1)}${unit}`) }],
      legend: { live: true },
      cursor: { points: { size: 6 } },
      series: [{}, ...series.map((s, i) => {
        const st = styleOf(s.colorIndex ?? i);
        return {
          label: s.label, stroke: st.stroke, dash: st.dash, width: 2, spanGaps: false,
          fill: s.fill ? `${st.stroke}22` : undefined, points: { show: (u, si, i0, i1) => i1 - i0 < 3 },
          value: (u, v) => (v == null ? '—' : `${+v.toFixed(2)}${unit}`),
        };
      })],
    };
    plot.current = new uPlot(opts, [x.t, ...series.map((s) => s.data)], host.current);
    const ro = new ResizeObserver(() => {
      if (plot.current && host.current) plot.current.setSize({ width: Math.max(260, host.current.clientWidth), height: 220 });
    });
    ro.observe(host.current);
    return () => { ro.disconnect(); plot.current && plot.current.destroy(); plot.current = null; };
  }, [sig, yMax]);
  useEffect(() => {
    if (plot.current && series.length) plot.current.setData([x.t, ...series.map((s) => s.data)], false);
  });
  return (
    <section class="card chart-card" aria-label={title} data-chart={id}>
      <h2>{title}</h2>
      {note && <p class="muted small">{note}</p>}
      {series.length ? <div class="chart" ref={host} role="img" aria-label={`${title} over time`} /> : <p class="muted">{empty}</p>}
    </section>
  );
}

function useHistory(range) {
  const [h, setH] = useState(null); // {data, source: 'daemon'|'page', error}
  useEffect(() => {
    let live = true; let timer = null;
    const load = async () => {
      try {
        const d = await API.history(range);
        if (live) setH({ data: d, source: 'daemon' });
      } catch (e) {
        if (!live) return;
        if (e.status === 404 || e.status === 405) setH({ data: localHistory(range), source: 'page' });
        else setH((o) => (o ? { ...o, error: e.message } : { data: localHistory(range), source: 'page', error: e.message }));
      }
      if (live) timer = setTimeout(load, 10000);
    };
    load();
    return () => { live = false; clearTimeout(timer); };
  }, [range]);
  return h;
}

export function DashboardPage({ nodes, apps }) {
  const [prefs, setPrefs] = useState(loadPrefs);
  const set = (p) => { const n = { ...prefs, ...p }; setPrefs(n); savePrefs(n); };
  const hist = useHistory(prefs.range);
  const node = nodes && nodes.some((n) => n.nodeName === prefs.node) ? prefs.node : '';
  if (!nodes) return <><Head /><div class="loading">Loading…</div></>;
  if (!nodes.length) return <><Head /><Empty title="No accelerator found" /></>;

  const h = hist && hist.data;
  const t = h ? h.timestamps || [] : [];
  const x = { t, start: h ? h.start : Math.floor(Date.now() / 1000) - prefs.range, end: h ? h.end : Math.floor(Date.now() / 1000) };
  // every device of the cluster, with its history where acceld keeps one
  // (acceld measures its own node's GPUs; a declared device has none)
  const byId = new Map((h ? h.devices || [] : []).map((d) => [d.id, d]));
  const hdevs = nodes.flatMap((n) => (n.devices || []).map((d) => byId.get(d.id) || {
    id: d.id, nodeName: n.nodeName, index: d.index, model: d.cardModel || typeTitle(d.mode), memoryTotal: d.memory, utilization: [], memoryUsed: [],
  })).concat((h ? h.devices || [] : []).filter((d) => !nodes.some((n) => (n.devices || []).some((x) => x.id === d.id))))
    .filter((d) => !node || d.nodeName === node);
  const labelOf = (d) => `${deviceLabel({ id: d.id, cardModel: d.model })} (${d.nodeName})`;
  // busiest first: the higher of peak VRAM use (% of the card) and peak utilization
  const score = (d) => Math.max(d.memoryTotal ? (peak(d.memoryUsed || []) / d.memoryTotal) * 100 : -1, peak(d.utilization || []));
  const ranked = [...hdevs].sort((a, b) => score(b) - score(a) || a.id.localeCompare(b.id));
  const picked = (prefs.picked || []).filter((id) => hdevs.some((d) => d.id === id));
  const chosen = picked.length ? hdevs.filter((d) => picked.includes(d.id)) : prefs.top ? ranked.slice(0, prefs.top) : ranked;
  const hidden = hdevs.length - chosen.length;
  // colours by place among the devices shown: the first 12 never repeat
  const shownIds = [...chosen].sort((a, b) => a.nodeName.localeCompare(b.nodeName) || (a.index ?? 0) - (b.index ?? 0)).map((d) => d.id);
  const colorOf = (id) => shownIds.indexOf(id);

  const memSeries = chosen.filter((d) => (d.memoryUsed || []).some((v) => v != null))
    .map((d) => ({ label: labelOf(d), colorIndex: colorOf(d.id), data: d.memoryUsed.map((v) => (v == null ? null : toGi(v))) }));
  const utilSeries = chosen.filter((d) => (d.utilization || []).some((v) => v != null))
    .map((d) => ({ label: labelOf(d), colorIndex: colorOf(d.id), data: d.utilization }));
  const unmeasured = chosen.filter((d) => !(d.utilization || []).some((v) => v != null)).length;
  const noVram = chosen.filter((d) => !(d.memoryUsed || []).some((v) => v != null)).length;
  const sumOf = (key) => t.map((_, i) => {
    let s = null;
    for (const d of hdevs) { const v = (d[key] || [])[i]; if (v != null) s = (s || 0) + v; }
    return s;
  });
  const clusterTotal = hdevs.reduce((s, d) => s + (d.memoryTotal || 0), 0);
  const clusterSeries = hdevs.length ? [
    { label: node ? `Node ${node}: VRAM in use` : 'Whole cluster: VRAM in use', colorIndex: 0, fill: true, data: sumOf('memoryUsed').map((v) => (v == null ? null : toGi(v))) },
    { label: 'Total VRAM', colorIndex: 2, data: sumOf('memoryUsed').map((v) => (v == null ? null : toGi(clusterTotal))) },
  ] : [];
  const happs = h ? (h.apps || []).filter((a) => !node || (a.deviceIds || []).some((id) => hdevs.some((d) => d.id === id))) : [];
  const appSeries = happs.filter((a) => (a.memoryUsed || []).some((v) => v != null))
    .sort((a, b) => peak(b.memoryUsed) - peak(a.memoryUsed)).slice(0, prefs.top || undefined)
    .map((a, i) => ({ label: a.name, colorIndex: i, data: a.memoryUsed.map((v) => (v == null ? null : toGi(v))) }));
  // per-app utilization (acceld's per-process samples), where it is kept
  const appUtil = happs.filter((a) => (a.utilization || []).some((v) => v != null))
    .sort((a, b) => peak(b.utilization) - peak(a.utilization)).slice(0, prefs.top || undefined)
    .map((a, i) => ({ label: a.name, colorIndex: i, data: a.utilization }));

  const shown = nodes.filter((n) => !node || n.nodeName === node);
  const all = shown.flatMap((n) => n.devices);
  const total = all.reduce((s, d) => s + (d.memory || 0), 0);
  const alloc = all.reduce((s, d) => s + assignedOf(d), 0);
  const usedKnown = all.filter((d) => measured(d.usedMemory));
  const used = usedKnown.reduce((s, d) => s + d.usedMemory, 0);
  const running = (apps || []).filter((a) => a.state === 'running' && (!node || (a.allocations || []).some((y) => y.nodeName === node))).length;
  const togglePick = (id) => {
    const base = picked.length ? picked : chosen.map((d) => d.id);
    set({ picked: base.includes(id) ? base.filter((x2) => x2 !== id) : [...base, id] });
  };

  return (
    <>
      <Head>
        <div class="dash-controls">
          <label class="inline-field"><span>Scope</span>
            <select aria-label="Scope" value={node} onChange={(e) => set({ node: e.currentTarget.value, picked: [] })}>
              <option value="">Whole cluster</option>
              {nodes.map((n) => <option key={n.nodeName} value={n.nodeName}>Node {n.nodeName}</option>)}
            </select></label>
          <label class="inline-field"><span>Range</span>
            <select aria-label="Range" value={prefs.range} onChange={(e) => set({ range: Number(e.currentTarget.value) })}>
              {RANGES.map(([v, l]) => <option key={v} value={v}>{l}</option>)}
            </select></label>
        </div>
      </Head>
      <div class="tiles">
        <div class="tile"><div class="tile-label">Devices</div><div class="tile-value">{all.length}</div></div>
        <div class="tile"><div class="tile-label">Total memory</div><div class="tile-value">{gi(total)}</div></div>
        <div class="tile"><div class="tile-label">Assigned</div><div class="tile-value">{gi(alloc)}</div></div>
        <div class="tile"><div class="tile-label">In use now</div><div class="tile-value">{usedKnown.length ? gi(used) : 'not reported'}</div>
          {usedKnown.length > 0 && usedKnown.length < all.length && <div class="muted small">{all.length - usedKnown.length === 1 ? '1 device does' : `${all.length - usedKnown.length} devices do`} not report it</div>}</div>
        <div class="tile"><div class="tile-label">Running apps</div><div class="tile-value">{running}</div></div>
      </div>
      {hist && hist.source === 'page' && <p class="note" data-testid="history-source">This accel daemon keeps no history; the charts show what this page has sampled since it was opened.</p>}
      {hist && hist.error && <p class="note">The history could not be read: {hist.error}</p>}
      <div class="device-picker card" data-testid="device-picker">
        <div class="picker-row">
          <label class="inline-field"><span>Devices shown</span>
            <select aria-label="Devices shown" value={picked.length ? 'picked' : String(prefs.top)}
              onChange={(e) => { const v = e.currentTarget.value; if (v !== 'picked') set({ top: Number(v), picked: [] }); }}>
              {TOPS.map((n) => <option key={n} value={String(n)}>{n ? `Top ${n} by peak use` : 'All devices'}</option>)}
              {picked.length > 0 && <option value="picked">Picked by hand ({picked.length})</option>}
            </select></label>
          <span class="muted small" data-testid="shown-count">{chosen.length} of {hdevs.length} devices{hidden > 0 ? `; ${hidden} hidden` : ''}</span>
        </div>
        {hdevs.length > 1 && (
          <details>
            <summary>Pick devices</summary>
            <div class="picker-list">
              {[...hdevs].sort((a, b) => a.nodeName.localeCompare(b.nodeName) || (a.index ?? 0) - (b.index ?? 0)).map((d) => (
                <label class="check-row" key={d.id}>
                  <input type="checkbox" checked={chosen.some((c) => c.id === d.id)} onChange={() => togglePick(d.id)} />
                  <span class="swatch" style={{ background: colorOf(d.id) >= 0 ? styleOf(colorOf(d.id)).stroke : 'transparent' }} aria-hidden="true" />
                  {labelOf(d)}
                </label>
              ))}
            </div>
          </details>
        )}
      </div>
      {!hist ? <div class="loading">Loading the history…</div> : (
        <div class="grid charts">
          <Chart id="cluster-vram" x={x} title={node ? `VRAM in use on node ${node}` : 'VRAM in use, whole cluster'} unit=" Gi" series={clusterSeries}
            empty="No device reports its VRAM use." />
          <Chart id="device-vram" x={x} title="VRAM in use per device" unit=" Gi" series={memSeries} empty="None of these devices reports its VRAM use."
            note={noVram && memSeries.length ? notReporting(noVram, 'VRAM use') : ''} />
          <Chart id="device-util" x={x} title="GPU utilization per device" unit="%" yMax={100} series={utilSeries}
            empty="None of these devices reports its utilization."
            note={unmeasured && utilSeries.length ? notReporting(unmeasured, 'utilization') : ''} />
          <Chart id="app-vram" x={x} title="VRAM in use per app" unit=" Gi" series={appSeries} empty="No app reports GPU memory use." />
          <Chart id="app-util" x={x} title="GPU utilization per app" unit="%" yMax={100} series={appUtil} empty="No app reports its GPU utilization." />
        </div>
      )}
      <section class="card flush">
        <table class="table devices-table">
          <caption class="sr-only">Devices now</caption>
          <thead><tr><th>Device</th><th>Node</th><th>Memory</th><th>Assigned</th><th>In use</th><th>Utilization</th><th>Apps</th></tr></thead>
          <tbody>{all.map((d) => (
            <tr key={d.id}><td data-label="Device">{deviceLabel(d)}</td><td data-label="Node">{d.nodeName}</td><td data-label="Memory">{gi(d.memory)}</td>
              <td data-label="Assigned">{gi(assignedOf(d))}{d.elastic && d.elastic.inForce &&
                <div class="muted small">of {gi(d.elastic.quotaCapacity)}: elastic, {d.elastic.overcommit}× the card</div>}</td><td data-label="In use">{giOr(d.usedMemory)}</td>
              <td data-label="Utilization">{pctOr(utilOf(d))}</td>
              <td data-label="Apps">{(d.bindings || []).map((b) => (b.hidden || !b.appName ? "another user's app"
                : `${b.appName}${apps && apps.find((a) => a.name === b.appName) ? ` (${stateLabel(apps.find((a) => a.name === b.appName).state).toLowerCase()}${elasticText(apps.find((a) => a.name === b.appName)) ? `; ${elasticText(apps.find((a) => a.name === b.appName))}` : ''})` : ''}`)).join(', ') || '—'}</td></tr>
          ))}</tbody>
        </table>
      </section>
    </>
  );
}

function Head({ children }) {
  return (
    <div class="page-head row">
      <div><h1>Dashboard</h1><p class="muted">GPU memory and utilization over time, for the whole cluster or one node.</p></div>
      {children}
    </div>
  );
}
