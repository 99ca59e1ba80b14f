// Opens a saved workbench notebook (file://, offline) whose graph has conditional bodies,
// clicks the first body's toggle badge under its holder and reports what the DAG view drew
// before and after (data-bodies, data-bodies-open, data-body-nodes); a second click closes
// it. Started by test_notebook_html_browser.py. Usage: node bodies_offline.mjs <html> <shot.png>

import { runOffline } from "./offline_page.mjs";

const [file, shot] = process.argv.slice(2);
const read = (page) =>
  page.$eval(".ow-dag", (el) => ({
    bodies: Number(el.dataset.bodies ?? -1),
    open: Number(el.dataset.bodiesOpen ?? -1),
    drawn: Number(el.dataset.bodyNodesDrawn ?? -1),
    names: el.dataset.bodyNodes ?? "",
  }));
await runOffline(file, async (page, out) => {
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
});
