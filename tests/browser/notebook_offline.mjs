// Opens a notebook saved as HTML by oxiwork's nbconvert exporter (file://) in Debian's
// Chromium, offline, with every network request refused and counted; prints one JSON line:
// console and page errors, requests, the workbench's drawn DAG (nodes drawn, of how many),
// whether the pass views came from the saved state, and what a request to the absent
// slider switches to the last stage saved with the notebook (its title and memory chart). Started by test_notebook_html_browser.py.
// Usage: node notebook_offline.mjs <notebook.html> <shot.png>

import { runOffline } from "./offline_page.mjs";

const [file, shot] = process.argv.slice(2);
await runOffline(file, async (page, out) => {
  await page.waitForFunction(() => document.documentElement.dataset.owSavedWidgets !== undefined && Number(document.querySelector(".ow-dag")?.dataset.drawn ?? 0) > 0, null, { timeout: 60000 });
  out.saved_widgets = Number(await page.evaluate(() => document.documentElement.dataset.owSavedWidgets));
  out.dag = await page.$eval(".ow-dag", (el) => ({ drawn: Number(el.dataset.drawn), nodes: Number(el.dataset.nodes) }));
  out.passes = await page.$eval(".ow-root", (el) => el.dataset.passes);
  out.header = await page.$eval(".ow-header", (el) => el.textContent);
  await page.screenshot({ path: shot.replace(/\.png$/, "_input.png") });
  // Groups by module path (or repeated block): collapse the first level, count the groups.
  const depth = page.locator(".ow-group-depth").first();
  out.group_depths = await page.locator(".ow-group-depth option").count();
  out.folded = await page.$eval(".ow-dag", (el) => el.dataset.folded);
  if (out.group_depths >= 2) {
    await depth.selectOption("1");
    await page.waitForTimeout(300);
    out.groups = Number(await page.$eval(".ow-dag", (el) => el.dataset.groups));
    out.groups_drawn = Number(await page.$eval(".ow-dag", (el) => el.dataset.drawn));
    await page.screenshot({ path: shot.replace(/\.png$/, "_groups.png") });
    await depth.selectOption("0");
    await page.waitForTimeout(200);
  }
  // The pass slider switches to the last saved stage without a kernel; the memory chart
  // (bottom tab) is drawn from the saved state there.
  const slider = page.locator(".ow-pass-slider");
  const last = await slider.getAttribute("max");
  await slider.evaluate((el, v) => {
    el.value = v;
    el.dispatchEvent(new Event("change", { bubbles: true }));
  }, last);
  await page.waitForFunction((v) => document.querySelector(".ow-root")?.dataset.passIndex === v, last, { timeout: 10000 });
  out.pass_index = Number(last);
  await page.locator('.ow-tab[data-tab="memory"]').first().click();
  await page.waitForTimeout(300);
  out.after = await page.evaluate(() => ({
    title: document.querySelector(".ow-header")?.textContent ?? "",
    rects: Number(document.querySelector("[data-rects]")?.dataset.rects ?? -1),
    drawn: Number(document.querySelector(".ow-dag")?.dataset.drawn ?? 0),
    nodes: Number(document.querySelector(".ow-dag")?.dataset.nodes ?? 0),
  }));
  if (shot) await page.screenshot({ path: shot });
  out.status = await page.evaluate(() => document.querySelector(".ow-status")?.textContent ?? "");
});
