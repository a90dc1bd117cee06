// Bundles web/src into web/dist (index.html + assets/app.js + assets/app.css).
// No hashes in file names, so the committed dist/ changes only when the code does.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, 'dist');
const watch = process.argv.includes('--watch');

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, 'assets'), { recursive: true });
copyFileSync(join(here, 'index.html'), join(dist, 'index.html'));
copyFileSync(join(here, 'src', 'favicon.svg'), join(dist, 'favicon.svg'));

const options = {
  entryPoints: { app: join(here, 'src', 'main.jsx') },
  outdir: join(dist, 'assets'),
  bundle: true,
  minify: !watch,
  sourcemap: false,
  format: 'iife',
  target: ['chrome100', 'firefox100', 'safari15'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  legalComments: 'none',
  logLevel: 'info',
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
