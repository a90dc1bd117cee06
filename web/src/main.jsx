// accel web page: the shell (login, navigation, polling) and the routes.
import { render } from 'preact';
import { useEffect, useState, useCallback, useRef } from 'preact/hooks';
import 'uplot/dist/uPlot.min.css';
import './style.css';
import { api, API, getToken, setToken, takeTokenFromHash, setUnauthorizedHandler, ApiError } from './api.js';
import { DialogHost, ToastHost } from './ui.jsx';
import { AcceleratorPage, ManageNodePage } from './accelerator.jsx';
import { AppsPage } from './apps.jsx';
import { DashboardPage, recordSample } from './dashboard.jsx';

const POLL_MS = 3000;

function useRoute() {
  const get = () => (location.hash.replace(/^#\/?/, '') || 'accelerator').split('/').map(decodeURIComponent);
  const [route, setRoute] = useState(get);
  useEffect(() => {
    const on = () => setRoute(get());
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

function App() {
  const [authed, setAuthed] = useState(!!getToken());
  const [role, setRole] = useState(null);
  const [loginError, setLoginError] = useState('');
  const [nodes, setNodes] = useState(null);
  const [apps, setApps] = useState(null);
  const [err, setErr] = useState('');
  const [navOpen, setNavOpen] = useState(false);
  const route = useRoute();
  const timer = useRef(null);

  const logout = useCallback((msg) => {
    setToken('');
    setAuthed(false); setRole(null); setNodes(null); setApps(null);
    setLoginError(typeof msg === 'string' ? msg : '');
  }, []);
  useEffect(() => { setUnauthorizedHandler(() => logout('Your session has ended. Sign in again.')); }, []);

  const refresh = useCallback(async () => {
    try {
      const [n, a] = await Promise.all([API.resources(), API.apps()]);
      setNodes(n || []); setApps(a || []); setErr('');
      recordSample(n || [], a || []);
    } catch (e) {
      if (e.status !== 401) setErr(e.message);
    }
  }, []);

  useEffect(() => {
    if (!authed) return undefined;
    let live = true;
    fetchRole(getToken()).then((r) => live && setRole(r)).catch((e) => {
      if (e.status === 401) logout('This token is not valid.'); else setRole('member');
    });
    refresh();
    const tick = () => {
      timer.current = setTimeout(async () => { if (!document.hidden) await refresh(); if (live) tick(); }, POLL_MS);
    };
    tick();
    return () => { live = false; clearTimeout(timer.current); };
  }, [authed]);

  if (!authed) return <Login onLogin={() => { setLoginError(''); setAuthed(true); }} error={loginError} />;

  const page = route[0];
  let body;
  const props = { nodes, apps, role, refresh };
  if (page === 'accelerator' && route[1] === 'node') body = <ManageNodePage {...props} nodeName={route[2]} />;
  else if (page === 'apps') body = <AppsPage {...props} />;
  else if (page === 'dashboard') body = <DashboardPage {...props} />;
  else body = <AcceleratorPage {...props} />;

  return (
    <div class="shell">
      <aside class={`side${navOpen ? ' open' : ''}`}>
        <div class="brand"><span class="logo" aria-hidden="true" />accel<span class="brand-sub">Settings</span></div>
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
        <header class="topbar">
          <button class="icon menu" aria-label="Menu" onClick={() => setNavOpen(!navOpen)}>☰</button>
          {err && <div class="banner error" role="alert">{err}</div>}
        </header>
        <main class="content">{body}</main>
      </div>
      <DialogHost />
      <ToastHost />
    </div>
  );
}

takeTokenFromHash();
render(<App />, document.getElementById('root'));
