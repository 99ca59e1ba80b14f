// Bundles the widget into one ESM file (plus its CSS) inside the Python package, so the
// widget never imports anything from the network at run time.
import { build } from "esbuild";
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outDir = resolve(here, "../oxiwork/static");
mkdirSync(outDir, { recursive: true });

await build({
  entryPoints: [resolve(here, "src/index.ts")],
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: process.argv.includes("--minify"),
  sourcemap: false,
  outfile: resolve(outDir, "widget.js"),
  logLevel: "warning",
});
// The offline host of notebooks saved as HTML (oxiwork.export.notebook inlines it in the
// page): a classic script, so it runs from an inline <script> on a file:// page.
await build({
  entryPoints: [resolve(here, "src/embed.ts")],
  bundle: true,
  format: "iife",
  target: "es2020",
  minify: true,
  sourcemap: false,
  outfile: resolve(outDir, "embed.js"),
  logLevel: "warning",
});
copyFileSync(resolve(here, "src/widget.css"), resolve(outDir, "widget.css"));
console.log(`built ${resolve(outDir, "widget.js")}, embed.js and widget.css`);
