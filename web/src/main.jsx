// accel web page: the shell (login, navigation, polling) and the routes.
import { render } from 'preact';
import { useEffect, useState, useCallback, useRef } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { api, API, getToken, setToken, takeTokenFromHash, setUnauthorizedHandler, ApiError } from './api.js';
import { DialogHost, ToastHost } from './ui.jsx';
import { setDeviceLabels } from './format.js';
import { AcceleratorPage, ManageNodePage } from './accelerator.jsx';
import { AppsPage } from './apps.jsx';
import { DashboardPage, recordSample } from './dashboard.jsx';
import { Offline } from './offline.js';

const POLL_MS = 3000;

function useRoute() {
  const get = () => (location.hash.replace(/^#\/?/, '') || 'accelerator').split('/').map(decodeURIComponent);
  const [route, setRoute] = useState(get);
  useEffect(() => {
    // a #token= link followed while the page is open (the sign-in page
    // too): taken, and dropped from the address bar, before the route
    const on = () => {
      if (takeTokenFromHash()) window.dispatchEvent(new Event('accel-token'));
      setRoute(get());
    };
    window.addEventListener('hashchange', on);
    return () => window.removeEventListener('hashchange', on);
  }, []);
  return route;
}

function Login({ onLogin, error }) {
  const [tok, setTok] = useState('');
  const [err, setErr] = useState(error || '');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const t = tok.trim();
    if (!t) { setErr('Enter your access token.'); return; }
    setBusy(true); setErr('');
    try {
      await fetchRole(t);
      setToken(t);
      onLogin();
    } catch (x) {
      setErr(x.status === 401 ? 'This token is not valid.' : (x.message || 'Sign-in failed.'));
    } finally { setBusy(false); }
  };
  return (
    <main class="login">
      <form class="login-card" onSubmit={submit} aria-label="Sign in">
        <div class="brand big"><span class="logo" aria-hidden="true" />accel</div>
        <h1>Sign in</h1>
        <p class="muted">Use the token the administrator gave you. The admin token is in <code>&lt;data-dir&gt;/admin.token</code>.</p>
        <label for="token">Access token</label>
        <input id="token" name="token" type="password" autocomplete="current-password" value={tok}
          onInput={(e) => setTok(e.currentTarget.value)} autofocus />
        {err && <p class="error" role="alert">{err}</p>}
        <button class="btn primary block" type="submit" disabled={busy}>{busy ? 'Signing in…' : 'Sign in'}</button>
      </form>
    </main>
  );
}

// admin if GET /api/users answers; member if it says 403; invalid on 401.
async function fetchRole(token) {
  try {
    await API.users(token);
    return 'admin';
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) return 'member';
    if (e instanceof ApiError && e.status === 401) throw e;
    if (e instanceof ApiError && (e.status === 404 || e.status === 405)) {
      // no users route: check the token on a route every user may read
      await api('GET', '/api/apps', undefined, token);
      return 'member';
    }
    throw e;
  }
}

const NAV = [
  { id: 'accelerator', label: 'Accelerator', icon: 'M4 7h16v10H4z M8 3v4 M16 3v4 M8 17v4 M16 17v4' },
  { id: 'apps', label: 'Apps', icon: 'M4 4h6v6H4z M14 4h6v6h-6z M4 14h6v6H4z M14 14h6v6h-6z' },
  { id: 'dashboard', label: 'Dashboard', icon: 'M4 20V10 M10 20V4 M16 20v-7 M22 20H2' },
];

const TITLES = { accelerator: 'Accelerator', apps: 'Apps', dashboard: 'Dashboard' };
const pageTitle = (route) => (route[0] === 'accelerator' && route[1] === 'node' ? `Manage node ${route[2] || ''}` : TITLES[route[0]] || 'Accelerator');

function clock(ms) { return new Date(ms).toLocaleTimeString(); }

function App() {
  const [authed, setAuthed] = useState(!!getToken());
  const [role, setRole] = useState(null);
  const [loginError, setLoginError] = useState('');
  const [nodes, setNodes] = useState(null);
  const [apps, setApps] = useState(null);
  const [err, setErr] = useState('');
  const [offline, setOffline] = useState(null); // null, or {since, lastOk}
  const [navOpen, setNavOpen] = useState(false);
  const route = useRoute();
  const timer = useRef(null);
  const lastOk = useRef(0);
  const first = useRef(true);
  const menuBtn = useRef(null);

  const logout = useCallback((msg) => {
    setToken('');
    setAuthed(false); setRole(null); setNodes(null); setApps(null); setOffline(null);
    setLoginError(typeof msg === 'string' ? msg : '');
  }, []);
  useEffect(() => { setUnauthorizedHandler(() => logout('Your session has ended. Sign in again.')); }, []);
  const [session, setSession] = useState(0);
  useEffect(() => {
    const on = () => { setLoginError(''); setRole(null); setAuthed(true); setSession((x) => x + 1); };
    window.addEventListener('accel-token', on);
    return () => window.removeEventListener('accel-token', on);
  }, []);

  const refresh = useCallback(async () => {
    try {
      const [n, a] = await Promise.all([API.resources(), API.apps()]);
      setDeviceLabels(n || []);
      setNodes(n || []); setApps(a || []); setErr('');
      lastOk.current = Date.now();
      setOffline(null); Offline.set(false);
      recordSample(n || [], a || []);
    } catch (e) {
      if (e.status === 0 || e.status === 502 || e.status === 503 || e.status === 504) {
        setOffline((o) => o || { since: Date.now(), lastOk: lastOk.current });
        Offline.set(true);
      } else if (e.status !== 401) setErr(e.message);
    }
  }, []);

  useEffect(() => {
    if (!authed) return undefined;
    let live = true;
    const role1 = () => fetchRole(getToken()).then((r) => live && setRole(r)).catch((e) => {
      if (e.status === 401) logout('This token is not valid.');
      else if (e.status === 0) setTimeout(() => live && role1(), POLL_MS);
      else setRole('member');
    });
    role1();
    refresh();
    const tick = () => {
      timer.current = setTimeout(async () => { if (!document.hidden) await refresh(); if (live) tick(); }, POLL_MS);
    };
    tick();
    return () => { live = false; clearTimeout(timer.current); };
  }, [authed, session]);

  // navigation: top of the page, focus on the new heading, the title (SPEC 7)
  const title = pageTitle(route);
  useEffect(() => {
    document.title = `${title} · accel`;
    if (first.current) { first.current = false; return; }
    window.scrollTo(0, 0);
    setNavOpen(false);
    const h = document.querySelector('.content h1');
    if (h) { h.setAttribute('tabindex', '-1'); h.focus({ preventScroll: true }); }
  }, [route.join('/'), authed]);

  // the phone menu: Escape closes it and gives focus back to its button
  useEffect(() => {
    if (!navOpen) return undefined;
    const onKey = (e) => { if (e.key === 'Escape') { setNavOpen(false); menuBtn.current && menuBtn.current.focus(); } };
    document.addEventListener('keydown', onKey);
    const a = document.querySelector('#side-nav a');
    a && a.focus();
    return () => document.removeEventListener('keydown', onKey);
  }, [navOpen]);

  if (!authed) return <Login onLogin={() => { setLoginError(''); setAuthed(true); }} error={loginError} />;

  const page = route[0];
  let body;
  const props = { nodes, apps, role, refresh, offline: !!offline };
  if (page === 'accelerator' && route[1] === 'node') body = <ManageNodePage {...props} nodeName={route[2]} />;
  else if (page === 'apps') body = <AppsPage {...props} />;
  else if (page === 'dashboard') body = <DashboardPage {...props} />;
  else body = <AcceleratorPage {...props} />;

  return (
    <div class={`shell${offline ? ' is-offline' : ''}`}>
      {offline && (
        <div class="offline-bar" role="alert" data-testid="offline">
          <b>The accel daemon cannot be reached.</b>{' '}
          <span>{offline.lastOk ? `What you see is from ${clock(offline.lastOk)} and may be out of date.` : 'No data could be loaded.'} Controls are disabled; the page retries every {POLL_MS / 1000} seconds.</span>
        </div>
      )}
      <header class="topbar">
        <button ref={menuBtn} class="icon menu" aria-label="Menu" aria-expanded={navOpen ? 'true' : 'false'} aria-controls="side-nav"
          onClick={() => setNavOpen(!navOpen)}>{navOpen ? '×' : '☰'}</button>
        <span class="topbar-title">{title}</span>
      </header>
      {navOpen && <div class="scrim" onClick={() => setNavOpen(false)} aria-hidden="true" />}
      <aside class={`side${navOpen ? ' open' : ''}`} id="side-nav">
        <div class="brand"><span class="logo" aria-hidden="true" />accel</div>
        <nav aria-label="Main">
          {NAV.map((n) => (
            <a key={n.id} href={`#/${n.id}`} class={page === n.id || (n.id === 'accelerator' && !NAV.some((x) => x.id === page)) ? 'active' : ''}
              aria-current={page === n.id ? 'page' : undefined} onClick={() => setNavOpen(false)}>
              <svg viewBox="0 0 24 24" aria-hidden="true"><path d={n.icon} /></svg>{n.label}
            </a>
          ))}
        </nav>
        <div class="side-foot">
          <div class="who"><span class="muted">Signed in as</span> <b>{role === 'admin' ? 'Administrator' : role === 'member' ? 'Member' : '…'}</b></div>
          <button class="btn ghost small" onClick={() => logout('')}>Sign out</button>
        </div>
      </aside>
      <div class="main">
        {err && <div class="banner error" role="alert">{err}</div>}
        <main class={`content${offline ? ' stale' : ''}`} aria-busy={offline ? 'true' : undefined}>
          <fieldset class="content-controls" disabled={!!offline}>
            {body}
          </fieldset>
        </main>
      </div>
      <DialogHost />
      <ToastHost />
    </div>
  );
}

takeTokenFromHash();
render(<App />, document.getElementById('root'));
