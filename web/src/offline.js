// Whether acceld answered the last poll. Dialogs read it to disable their
// controls while the daemon is away (SPEC 7); main.jsx sets it.
import { useEffect, useState } from 'preact/hooks';

const subs = new Set();
let down = false;
export const Offline = {
  get: () => down,
  set(v) { if (v !== down) { down = v; subs.forEach((f) => f(v)); } },
};
export function useOffline() {
  const [v, setV] = useState(down);
  useEffect(() => { subs.add(setV); setV(down); return () => subs.delete(setV); }, []);
  return v;
}
