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
copyFileSync(resolve(here, "src/widget.css"), resolve(outDir, "widget.css"));
console.log(`built ${resolve(outDir, "widget.js")} and widget.css`);
