// Small building blocks: modal dialog, promise-based confirm, toasts, bars.
import { useEffect, useRef, useState } from 'preact/hooks';

export function Modal({ title, onClose, children, footer, wide, label }) {
  const ref = useRef(null);
  useEffect(() => {
    const prev = document.activeElement;
    const el = ref.current;
    const first = el && el.querySelector('[autofocus], select, input, button:not(.modal-x)');
    (first || el)?.focus();
    const onKey = (e) => {
      if (e.key !== 'Escape' || !el) return;
      const all = document.querySelectorAll('.modal');
      if (all[all.length - 1] === el) onClose && onClose();
    };
    document.addEventListener('keydown', onKey);
    return () => { document.removeEventListener('keydown', onKey); prev && prev.focus && prev.focus(); };
  }, []);
  return (
    <div class="backdrop" onMouseDown={(e) => { if (e.target === e.currentTarget) onClose && onClose(); }}>
      <div class={`modal${wide ? ' wide' : ''}`} role="dialog" aria-modal="true" aria-label={label || title} ref={ref} tabIndex={-1}>
        <header class="modal-head">
          <h2>{title}</h2>
          {onClose && <button class="icon modal-x" aria-label="Close" onClick={onClose}>×</button>}
        </header>
        <div class="modal-body">{children}</div>
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
  if (!d) return null;
  const done = (v) => { setD(null); d.resolve(v); };
  return (
    <Modal title={d.title} onClose={() => done(false)} label={d.title}
      footer={<>
        <button class="btn" onClick={() => done(false)}>{d.cancel || 'Cancel'}</button>
        <button class={`btn ${d.danger ? 'danger' : 'primary'}`} autofocus onClick={() => done(true)}>{d.ok || 'OK'}</button>
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
  return <div class="empty"><h3>{title}</h3>{children && <p>{children}</p>}</div>;
}

export function errText(e) {
  if (!e) return '';
  return e.message || String(e);
}
