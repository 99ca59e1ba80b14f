// The one way the offline browser scripts (notebook_offline.mjs, report_offline.mjs,
// bodies_offline.mjs) open a saved file: Chromium as chromium.mjs starts it, offline,
// 1280x800, every request but the page itself recorded and refused, console and page errors
// collected. Each script then reads what it checks from `page` and prints `out`.

import { resolve } from "node:path";
import { pathToFileURL } from "node:url";

import { launch } from "./chromium.mjs";

/**
 * Opens `file` (a path) offline and runs `check(page, out, url)`; then prints `out` as one
 * JSON line. `out` starts with console_errors, page_errors and requests (any URL but the
 * page, blob: and data: that the page asked for).
 */
export async function runOffline(file, check) {
  const url = pathToFileURL(resolve(file)).href;
  const browser = await launch();
  const out = { console_errors: [], requests: [], page_errors: [] };
  const note = (u) => {
    if (u !== url && !u.startsWith("blob:") && !u.startsWith("data:") && !out.requests.includes(u)) out.requests.push(u);
  };
  try {
    const context = await browser.newContext({ offline: true, viewport: { width: 1280, height: 800 } });
    await context.route("**/*", (route) => {
      const u = route.request().url();
      if (u === url) return route.continue();
      note(u);
      return route.abort();
    });
    const page = await context.newPage();
    page.on("console", (m) => {
      if (m.type() === "error") out.console_errors.push(m.text());
    });
    page.on("pageerror", (e) => out.page_errors.push(String(e)));
    page.on("request", (r) => note(r.url()));
    page.on("requestfailed", (r) => note(r.url()));
    await page.goto(url, { waitUntil: "load" });
    await check(page, out, url);
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out) + "\n");
}
