// Bundles web/src into web/dist (index.html + assets/app.js + assets/app.css,
// plus chunks loaded on demand: the YAML parser of the install dialog).
// The entry keeps its name, so the committed dist/ changes only when the code
// does; chunks are named by content. Every text file also gets precompressed
// .gz and .br twins, which acceld sends to a browser that accepts them.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { brotliCompressSync, gzipSync, constants as zc } from 'node:zlib';
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
  splitting: true,
  chunkNames: 'chunk-[hash]',
  minify: !watch,
  sourcemap: false,
  format: 'esm',
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
  compressAll(dist);
}

// name.gz (gzip -9) and name.br (brotli, best) next to every text file;
// byte-for-byte reproducible, so an unchanged build leaves git clean.
function compressAll(dir) {
  for (const f of readdirSync(dir)) {
    const p = join(dir, f);
    if (statSync(p).isDirectory()) { compressAll(p); continue; }
    if (!/\.(html|js|css|svg|json)$/.test(f)) continue;
    const raw = readFileSync(p);
    writeFileSync(`${p}.gz`, gzipSync(raw, { level: 9 }));
    writeFileSync(`${p}.br`, brotliCompressSync(raw, {
      params: { [zc.BROTLI_PARAM_QUALITY]: 11, [zc.BROTLI_PARAM_SIZE_HINT]: raw.length },
    }));
  }
}
