// What the Apps view and the dashboard say of an app's elastic memory
// (web/src/elastic.jsx, elasticText; SPEC 4.4): what it gave back and got,
// and, to a member, another member's app only as "another user's app"
// (SPEC 3: the API gives its name as "" with lastToHidden /
// lastFromHidden). No browser: esbuild (web/node_modules) bundles the
// module for node. Exit: 0 passed, 1 failed, 77 skipped (no node_modules).
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';

const here = dirname(fileURLToPath(import.meta.url));
const WEB = join(resolve(process.env.ACCEL_SOURCE_DIR || join(here, '..', '..')), 'web');
if (!existsSync(join(WEB, 'node_modules', 'esbuild'))) {
  console.log('SKIP: web/node_modules is missing (bash scripts/setup-web.sh)');
  process.exit(77);
}
const esbuild = createRequire(join(WEB, 'package.json'))('esbuild');
const out = await esbuild.build({
  stdin: { contents: "export { elasticText } from './src/elastic.jsx';", resolveDir: WEB, loader: 'js' },
  bundle: true, write: false, format: 'esm', platform: 'neutral', mainFields: ['module', 'main'],
  jsx: 'automatic', jsxImportSource: 'preact', logLevel: 'silent',
});
const { elasticText } = await import(`data:text/javascript;base64,${Buffer.from(out.outputFiles[0].text).toString('base64')}`);

const GI = 1024 ** 3;
const ago = Date.now() - 3 * 60 * 1000;
let failed = 0;
function check(name, fn) {
  try { fn(); console.log(`ok   ${name}`); } catch (e) { failed++; console.log(`FAIL ${name}: ${e.message}`); }
}
check('names the other app', () => {
  const t = elasticText({ elastic: { lent: { lastBytes: 20 * GI, lastTo: 'comfyui', lastAt: ago } } });
  assert.match(t, /^gave back 20 Gi to comfyui 3 min ago$/);
});
check("another member's app is another user's app", () => {
  const t = elasticText({ elastic: {
    lent: { lastBytes: 16 * GI, lastTo: '', lastToHidden: true, lastAt: ago },
    reclaimed: { lastBytes: 8 * GI, lastFrom: '', lastFromHidden: true, lastAt: ago } } });
  assert.equal(t, "gave back 16 Gi to another user's app 3 min ago; got 8 Gi from another user's app 3 min ago");
});
console.log(`${2 - failed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
