// Dashboard: a client-side time series of every poll of GET
// /api/compute-resources and GET /api/apps, drawn with uPlot.
import { useEffect, useRef, useState } from 'preact/hooks';
import uPlot from 'uplot';
import { gi, toGi, typeTitle, stateLabel } from './format.js';
import { Empty } from './ui.jsx';

const MAX = 1200; // samples kept (an hour at one per 3 s)
const store = { t: [], dev: new Map(), app: new Map(), ver: 0 };
const listeners = new Set();

function push(map, id, meta, value) {
  let s = map.get(id);
  if (!s) {
    s = { ...meta, v: new Array(store.t.length - 1).fill(null) };
    map.set(id, s);
  }
  Object.assign(s, meta);
  s.v.push(value);
}

export function recordSample(nodes, apps) {
  store.t.push(Date.now() / 1000);
  const seenD = new Set();
  const seenA = new Set();
  for (const n of nodes) {
    for (const d of n.devices || []) {
      seenD.add(d.id);
      const util = typeof d.utilization === 'number' ? d.utilization : (d.usage && typeof d.usage.utilization === 'number' ? d.usage.utilization : null);
      push(store.dev, d.id, {
        node: n.nodeName, label: `${d.cardModel || typeTitle(d.mode)} (${n.nodeName})`, memory: d.memory,
        util: util, used: d.usedMemory, allocated: d.allocated || 0,
      }, { used: d.usedMemory ?? null, alloc: assignedOf(d), util });
    }
  }
  for (const a of apps) {
    seenA.add(a.name);
    const nodesOf = [...new Set((a.allocations || []).map((x) => x.nodeName))];
    const mem = a.usage && a.usage.memory != null ? a.usage.memory : null;
    const alloc = (a.allocations || []).reduce((s, x) => s + (x.memory || 0), 0);
    push(store.app, a.name, { nodes: nodesOf, state: a.state, label: a.name }, { used: mem, alloc });
  }
  for (const [id, s] of store.dev) if (!seenD.has(id)) s.v.push(null);
  for (const [id, s] of store.app) if (!seenA.has(id)) s.v.push(null);
  if (store.t.length > MAX) {
    const cut = store.t.length - MAX;
    store.t.splice(0, cut);
    for (const s of store.dev.values()) s.v.splice(0, cut);
    for (const s of store.app.values()) s.v.splice(0, cut);
  }
  store.ver++;
  listeners.forEach((f) => f(store.ver));
}

// Exclusive and Time slicing bind the whole card: count it as assigned.
export const assignedOf = (d) => (d.supportType === 'MemorySlice' ? d.allocated || 0 : (d.bindings || []).length ? d.memory || 0 : 0);

const COLORS = ['#2f5bea', '#e8590c', '#2b8a3e', '#ae3ec9', '#0b7285', '#c92a2a', '#5f3dc4', '#a61e4d', '#364fc7', '#087f5b'];

function Chart({ title, series, unit, yMax, empty, id }) {
  const host = useRef(null);
  const plot = useRef(null);
  const sig = series.map((s) => s.label).join('|');
  useEffect(() => {
    if (!host.current || !series.length) return undefined;
    const width = Math.max(280, host.current.clientWidth);
    const opts = {
      width, height: 220,
      scales: { x: { time: true }, y: yMax ? { range: [0, yMax] } : { range: (u, min, max) => [0, Math.max(1, max * 1.15)] } },
      axes: [{ stroke: '#5b6472', grid: { stroke: '#eef0f4' } },
        { stroke: '#5b6472', grid: { stroke: '#eef0f4' }, size: 56, values: (u, vals) => vals.map((v) => `${+v.toFixed(1)}${unit}`) }],
      legend: { live: true },
      cursor: { points: { size: 6 } },
      series: [{}, ...series.map((s, i) => ({
        label: s.label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false,
        fill: series.length === 1 ? `${COLORS[0]}22` : undefined,
        value: (u, v) => (v == null ? '—' : `${+v.toFixed(2)}${unit}`),
      }))],
    };
    plot.current = new uPlot(opts, [store.t.slice(), ...series.map((s) => s.data)], host.current);
    const ro = new ResizeObserver(() => {
      if (plot.current && host.current) plot.current.setSize({ width: Math.max(280, host.current.clientWidth), height: 220 });
    });
    ro.observe(host.current);
    return () => { ro.disconnect(); plot.current && plot.current.destroy(); plot.current = null; };
  }, [sig, yMax]);
  useEffect(() => {
    if (plot.current && series.length) plot.current.setData([store.t.slice(), ...series.map((s) => s.data)]);
  });
  return (
    <section class="card chart-card" aria-label={title} data-chart={id}>
      <h3>{title}</h3>
      {series.length ? <div class="chart" ref={host} role="img" aria-label={`${title} over time`} /> : <p class="muted">{empty}</p>}
    </section>
  );
}

export function DashboardPage({ nodes, apps }) {
  const [, setVer] = useState(0);
  const [node, setNode] = useState('');
  useEffect(() => { listeners.add(setVer); return () => listeners.delete(setVer); }, []);
  if (!nodes) return <><Head /><div class="loading">Loading…</div></>;
  if (!nodes.length) return <><Head /><Empty title="No accelerator found" /></>;

  const inNode = (d) => !node || d.node === node;
  const devs = [...store.dev.entries()].filter(([, s]) => inNode(s));
  const appSeries = [...store.app.entries()].filter(([, s]) => !node || (s.nodes || []).includes(node));
  const perDevice = (pick) => {
    const list = devs.map(([, s]) => ({ label: s.label, data: s.v.map((x) => (x ? pick(x) : null)) }));
    if (!node && devs.length > 1) {
      list.unshift({ label: 'Whole cluster', data: store.t.map((_, i) => devs.reduce((sum, [, s]) => {
        const x = s.v[i]; return x ? sum + (pick(x) || 0) : sum; }, 0)) });
    }
    return list;
  };
  const memSeries = perDevice((x) => toGi(x.used ?? 0));
  const allocSeries = perDevice((x) => toGi(x.alloc || 0));
  const utilDevs = devs.filter(([, s]) => s.v.some((x) => x && x.util != null));
  const utilSeries = utilDevs.map(([, s]) => ({ label: s.label, data: s.v.map((x) => (x && x.util != null ? x.util : null)) }));
  const appMem = appSeries.filter(([, s]) => s.v.some((x) => x && x.used != null))
    .map(([, s]) => ({ label: s.label, data: s.v.map((x) => (x && x.used != null ? toGi(x.used) : null)) }));
  const appAlloc = appSeries.filter(([, s]) => s.v.some((x) => x && x.alloc > 0))
    .map(([, s]) => ({ label: s.label, data: s.v.map((x) => (x ? toGi(x.alloc) : null)) }));

  const shown = nodes.filter((n) => !node || n.nodeName === node);
  const all = shown.flatMap((n) => n.devices);
  const total = all.reduce((s, d) => s + (d.memory || 0), 0);
  const alloc = all.reduce((s, d) => s + assignedOf(d), 0);
  const used = all.reduce((s, d) => s + (d.usedMemory || 0), 0);
  const running = (apps || []).filter((a) => a.state === 'running' && (!node || (a.allocations || []).some((x) => x.nodeName === node))).length;

  return (
    <>
      <Head>
        <label class="inline-field">
          <span>Scope</span>
          <select aria-label="Scope" value={node} onChange={(e) => setNode(e.currentTarget.value)}>
            <option value="">Whole cluster</option>
            {nodes.map((n) => <option key={n.nodeName} value={n.nodeName}>Node {n.nodeName}</option>)}
          </select>
        </label>
      </Head>
      <div class="tiles">
        <div class="tile"><div class="tile-label">Devices</div><div class="tile-value">{all.length}</div></div>
        <div class="tile"><div class="tile-label">Total memory</div><div class="tile-value">{gi(total)}</div></div>
        <div class="tile"><div class="tile-label">Assigned</div><div class="tile-value">{gi(alloc)}</div></div>
        <div class="tile"><div class="tile-label">In use (live)</div><div class="tile-value">{gi(used)}</div></div>
        <div class="tile"><div class="tile-label">Running apps</div><div class="tile-value">{running}</div></div>
      </div>
      <div class="grid charts">
        <Chart id="device-vram" title="VRAM in use per device" unit=" Gi" series={memSeries} empty="No data yet." />
        <Chart id="device-util" title="GPU utilization per device" unit="%" yMax={100} series={utilSeries}
          empty="No device reports its utilization yet." />
        <Chart id="device-alloc" title="VRAM assigned per device" unit=" Gi" series={allocSeries} empty="No data yet." />
        <Chart id="app-vram" title="VRAM in use per app" unit=" Gi" series={appMem} empty="No app reports GPU memory use yet." />
        <Chart id="app-alloc" title="VRAM quota per app (Memory slicing)" unit=" Gi" series={appAlloc} empty="No app holds a VRAM quota now." />
      </div>
      <section class="card flush">
        <table class="table">
          <thead><tr><th>Device</th><th>Node</th><th>Memory</th><th>Assigned</th><th>In use</th><th>Utilization</th><th>Apps</th></tr></thead>
          <tbody>{all.map((d) => (
            <tr key={d.id}><td>{d.cardModel || typeTitle(d.mode)}</td><td>{d.nodeName}</td><td>{gi(d.memory)}</td>
              <td>{gi(assignedOf(d))}</td><td>{d.usedMemory != null ? gi(d.usedMemory) : '—'}</td>
              <td>{typeof d.utilization === 'number' ? `${Math.round(d.utilization)}%` : '—'}</td>
              <td>{(d.bindings || []).map((b) => `${b.appName}${apps && apps.find((a) => a.name === b.appName) ? ` (${stateLabel(apps.find((a) => a.name === b.appName).state).toLowerCase()})` : ''}`).join(', ') || '—'}</td></tr>
          ))}</tbody>
        </table>
      </section>
      <p class="muted small">Sampled every 3 seconds while this page is open; the history lives in this browser tab.</p>
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
