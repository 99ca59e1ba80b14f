// Opens a saved workbench notebook (file://, offline) whose graph has conditional bodies,
// clicks the first body's toggle badge under its holder and reports what the DAG view drew
// before and after (data-bodies, data-bodies-open, data-body-nodes); a second click closes
// it. Started by test_notebook_html_browser.py. Usage: node bodies_offline.mjs <html> <shot.png>

import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(resolve(here, "../../widget_js/package.json"));
const { chromium } = require("playwright-core");

const [file, shot] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: process.env.OXIWORK_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run"],
});
const out = { page_errors: [], console_errors: [] };
const read = (page) =>
  page.$eval(".ow-dag", (el) => ({
    bodies: Number(el.dataset.bodies ?? -1),
    open: Number(el.dataset.bodiesOpen ?? -1),
    drawn: Number(el.dataset.bodyNodesDrawn ?? -1),
    names: el.dataset.bodyNodes ?? "",
  }));
try {
  const context = await browser.newContext({ offline: true, viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  page.on("console", (m) => m.type() === "error" && out.console_errors.push(m.text()));
  page.on("pageerror", (e) => out.page_errors.push(String(e)));
  await page.goto(pathToFileURL(resolve(file)).href, { waitUntil: "load" });
  await page.waitForFunction(() => Number(document.querySelector(".ow-dag")?.dataset.bodies ?? 0) > 0, null, { timeout: 60000 });
  out.before = await read(page);
  const at = await page.$eval(".ow-dag-canvas", (c) => c.owBodyBadge(0));
  out.badge = at;
  await page.mouse.click(at.x, at.y);
  await page.waitForTimeout(300);
  out.after = await read(page);
  await page.screenshot({ path: shot });
  await page.mouse.click(at.x, at.y);
  await page.waitForTimeout(300);
  out.closed = await read(page);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
