// Small building blocks: modal dialog, promise-based confirm, toasts, bars.
import { useEffect, useRef, useState } from 'preact/hooks';
import { useOffline } from './offline.js';

const FOCUSABLE = 'a[href], button:not([disabled]), input:not([disabled]), select:not([disabled]), textarea:not([disabled]), [tabindex]:not([tabindex="-1"])';
const visible = (e) => e.offsetParent !== null || e.getClientRects().length > 0;
export const focusables = (el) => [...el.querySelectorAll(FOCUSABLE)].filter(visible);

// Focus given back to a control that the change then removes or disables
// (Remove, Launch in Resume, the mode switch's Switch mode…) fell to the top
// of the page. It goes instead to the control that takes the opener's
// place: the first enabled control of the opener's nearest scope still on
// the page (an app's row, the mode field, the assigned apps, a device), or
// that scope's [data-focus-home] (a heading) when it has none; a scope all
// of whose controls are disabled for now (a switch under way) is waited
// for. The watch ends once focus is somewhere else or after 15 s.
const SCOPES = '[data-focus-scope], [data-app], [data-device]';
function scopeKey(e) {
  for (const a of ['data-focus-scope', 'data-app', 'data-device']) {
    const v = e.getAttribute(a);
    if (v !== null) return `[${a}="${CSS.escape(v)}"]`;
  }
  return null;
}
// The opener's scopes, taken when the dialog opens: by the time it closes
// the opener may be gone from the page, and with it the way up to them.
export function focusTrail(opener) {
  if (!opener || !opener.closest) return null;
  const chain = [];
  for (let e = opener.closest(SCOPES); e; e = e.parentElement && e.parentElement.closest(SCOPES)) chain.push([e, scopeKey(e)]);
  return chain.length ? { opener, chain, inModal: opener.closest('.modal') } : null;
}
export function keepFocus(trail) {
  if (!trail) return;
  const { opener, chain, inModal } = trail;
  const usable = (e) => document.contains(e) && !e.disabled && visible(e) && !e.closest('[inert], fieldset[disabled]');
  const lost = () => {
    const a = document.activeElement;
    return !a || a === document.body || (a === opener && !usable(opener));
  };
  let obs = null; let timer = null;
  const stop = () => { obs && obs.disconnect(); clearTimeout(timer); };
  const check = () => {
    const top = [...document.querySelectorAll('.modal')].pop() || null;
    if (top !== inModal) return; // a dialog is open (or still closing) above the opener
    if (!lost()) { if (document.activeElement !== opener) stop(); return; }
    for (const [e, key] of chain) {
      const scope = document.contains(e) ? e : key && document.querySelector(key);
      if (!scope) continue;
      const next = focusables(scope).find(usable) || scope.querySelector('[data-focus-home]');
      if (next) { next.focus(); stop(); }
      return; // the nearest scope on the page decides, even if it must wait
    }
    // none on the page now (a list being reloaded): wait for it
  };
  obs = new MutationObserver(check);
  obs.observe(document.body, { subtree: true, childList: true, attributes: true, attributeFilter: ['disabled', 'class', 'hidden'] });
  timer = setTimeout(stop, 15000);
  check();
}

// A modal dialog (SPEC 7): focus stays inside it (Tab and Shift+Tab cycle),
// Escape closes it, and focus returns to where it was when it closes. The
// first control of the body gets focus once the body is `ready` (a dialog
// that is still loading holds focus on itself, not on Cancel).
export function Modal({ title, onClose, children, footer, wide, label, ready = true, initial }) {
  const offline = useOffline();
  const ref = useRef(null);
  const focused = useRef(false);
  useEffect(() => {
    const prev = document.activeElement;
    const trail = focusTrail(prev);
    const el = ref.current;
    const onKey = (e) => {
      if (!el) return;
      const all = document.querySelectorAll('.modal');
      if (all[all.length - 1] !== el) return;
      if (e.key === 'Escape') { e.preventDefault(); onClose && onClose(); return; }
      if (e.key !== 'Tab') return;
      const list = focusables(el);
      if (!list.length) { e.preventDefault(); el.focus(); return; }
      const first = list[0]; const last = list[list.length - 1];
      const inside = el.contains(document.activeElement);
      if (e.shiftKey && (document.activeElement === first || !inside || document.activeElement === el)) { e.preventDefault(); last.focus(); }
      else if (!e.shiftKey && (document.activeElement === last || !inside)) { e.preventDefault(); first.focus(); }
    };
    // focus that leaves the dialog some other way (a click behind it) is pulled back
    const onFocusIn = (e) => {
      const all = document.querySelectorAll('.modal');
      if (el && all[all.length - 1] === el && !el.contains(e.target)) el.focus();
    };
    document.addEventListener('keydown', onKey);
    document.addEventListener('focusin', onFocusIn);
    el && el.focus();
    return () => {
      document.removeEventListener('keydown', onKey);
      document.removeEventListener('focusin', onFocusIn);
      if (prev && prev.focus && document.contains(prev)) prev.focus();
      keepFocus(trail);
    };
  }, []);
  useEffect(() => {
    const el = ref.current;
    if (!el || !ready || focused.current) return;
    focused.current = true;
    const body = el.querySelector('.modal-body');
    const pick = (initial && el.querySelector(initial)) || el.querySelector('[data-autofocus]')
      || (body && focusables(body)[0]) || focusables(el.querySelector('.modal-foot') || el)[0];
    if (pick) pick.focus();
  }, [ready]);
  return (
    <div class="backdrop" onMouseDown={(e) => { if (e.target === e.currentTarget) onClose && onClose(); }}>
      <div class={`modal${wide ? ' wide' : ''}`} role="dialog" aria-modal="true" aria-label={label || title} ref={ref} tabIndex={-1}
        aria-busy={ready ? undefined : 'true'}>
        <header class="modal-head">
          <h2>{title}</h2>
          {onClose && <button class="icon modal-x" aria-label="Close" onClick={onClose}>×</button>}
        </header>
        <div class="modal-body">
          {offline && <p class="offline-note" role="alert">The accel daemon cannot be reached. This dialog waits until it answers again.</p>}
          {children}
        </div>
        {footer && <footer class="modal-foot">{footer}</footer>}
      </div>
    </div>
  );
}

// confirm({title, body, ok, danger}) → Promise<boolean>, rendered by <DialogHost/>.
let pushDialog = null;
export function confirmDialog(opts) {
  return new Promise((resolve) => {
    if (!pushDialog) { resolve(window.confirm(opts.title)); return; }
    pushDialog({ ...opts, resolve });
  });
}
export function DialogHost() {
  const [d, setD] = useState(null);
  useEffect(() => { pushDialog = setD; return () => { pushDialog = null; }; }, []);
  const offline = useOffline();
  if (!d) return null;
  const done = (v) => { setD(null); d.resolve(v); };
  return (
    <Modal title={d.title} onClose={() => done(false)} label={d.title}
      footer={<>
        <button class="btn" data-autofocus onClick={() => done(false)}>{d.cancel || 'Cancel'}</button>
        <button class={`btn ${d.danger ? 'danger' : 'primary'}`} disabled={offline} onClick={() => done(true)}>{d.ok || 'OK'}</button>
      </>}>
      <div class="confirm-body">{d.body}</div>
    </Modal>
  );
}

let pushToast = null;
export function toast(text, kind = 'ok') { pushToast && pushToast({ text, kind, id: Math.random() }); }
export function ToastHost() {
  const [list, setList] = useState([]);
  useEffect(() => {
    pushToast = (t) => {
      setList((l) => [...l, t]);
      setTimeout(() => setList((l) => l.filter((x) => x.id !== t.id)), t.kind === 'error' ? 8000 : 4000);
    };
    return () => { pushToast = null; };
  }, []);
  return (
    <div class="toasts" role="status" aria-live="polite">
      {list.map((t) => <div key={t.id} class={`toast ${t.kind}`}>{t.text}</div>)}
    </div>
  );
}

export function Bar({ value, max, label, second }) {
  if (value == null) return <div class="bar unknown" role="img" aria-label={`${label}: not reported`} />;
  const p = max ? Math.min(100, (value / max) * 100) : 0;
  const p2 = second != null && max ? Math.min(100, (second / max) * 100) : null;
  return (
    <div class="bar" role="meter" aria-valuemin={0} aria-valuemax={max || 0} aria-valuenow={value || 0} aria-label={label}>
      <div class="bar-fill" style={{ width: `${p}%` }} />
      {p2 != null && <div class="bar-used" style={{ width: `${p2}%` }} />}
    </div>
  );
}

export function Badge({ kind = '', children, title }) {
  return <span class={`badge ${kind}`} title={title}>{children}</span>;
}

export function Empty({ title, children }) {
  return <div class="empty"><h2>{title}</h2>{children && <p>{children}</p>}</div>;
}

export function errText(e) {
  if (!e) return '';
  return e.message || String(e);
}
