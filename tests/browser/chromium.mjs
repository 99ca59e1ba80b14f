// The one way every browser script here starts Chromium: Debian's (never a downloaded
// browser; OXIWORK_CHROMIUM overrides the path), headless, no background networking, and the
// `check(name, ok, detail)` helper that records a result and throws on the first failure.

import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
// playwright-core is a dev dependency of the widget package.
const require = createRequire(resolve(here, "../../widget_js/package.json"));
const { chromium } = require("playwright-core");

export function launch() {
  return chromium.launch({
    executablePath: process.env.OXIWORK_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      "--no-first-run",
    ],
  });
}

/** A `check(name, ok, detail)` that appends to `results.checks`, logs with `log`, throws if not ok. */
export function checker(results, log) {
  return (name, ok, detail = "") => {
    results.checks.push({ name, ok: !!ok, detail: String(detail) });
    if (!ok) throw new Error(`check failed: ${name}: ${detail}`);
    log(`ok  ${name}${detail ? ` (${detail})` : ""}`);
  };
}
