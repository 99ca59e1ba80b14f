// Opens an oxiwork HTML report (file://) in Debian's Chromium with every network request
// refused and counted, and prints one JSON line: console errors, requests, the view
// sections with an <svg>, the page's text, and whether given names appear as text.
// Started by test_report_browser.py. Usage: node report_offline.mjs <report.html> <shot.png>

import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, "../../widget_js/package.json"));
const { chromium } = require("playwright-core");

const [file, shot] = process.argv.slice(2);
const url = pathToFileURL(resolve(file)).href;
const browser = await chromium.launch({
  executablePath: process.env.OXIWORK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const out = { console_errors: [], requests: [], page_errors: [] };
try {
  const context = await browser.newContext({ offline: true, viewport: { width: 1280, height: 800 } });
  // Any request but the report itself is recorded and refused.
  await context.route("**/*", (route) => {
    const u = route.request().url();
    if (u === url) return route.continue();
    out.requests.push(u);
    return route.abort();
  });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") out.console_errors.push(m.text()); });
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  page.on("requestfailed", (r) => { if (r.url() !== url && !out.requests.includes(r.url())) out.requests.push(r.url()); });
  await page.goto(url, { waitUntil: "load" });
  out.views = await page.$$eval("section.view", (els) =>
    els.map((el) => ({ id: el.id, svg: el.querySelectorAll("svg").length, texts: el.querySelectorAll("svg text").length })));
  out.text = await page.evaluate(() => document.body.innerText);
  out.svg_text = await page.$$eval("svg text", (els) => els.map((e) => e.textContent));
  out.scripts = await page.$$eval("script", (els) => els.length);
  if (shot) await page.screenshot({ path: shot, fullPage: false });
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
