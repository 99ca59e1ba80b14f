// Opens an oxiwork HTML report (file://) in Debian's Chromium with every network request
// refused and counted, and prints one JSON line: console errors, requests, the view
// sections with an <svg>, the page's text, and whether given names appear as text.
// Started by test_report_browser.py. Usage: node report_offline.mjs <report.html> <shot.png>

import { runOffline } from "./offline_page.mjs";

const [file, shot] = process.argv.slice(2);
await runOffline(file, async (page, out) => {
  out.views = await page.$$eval("section.view", (els) =>
    els.map((el) => ({ id: el.id, svg: el.querySelectorAll("svg").length, texts: el.querySelectorAll("svg text").length })));
  out.text = await page.evaluate(() => document.body.innerText);
  out.svg_text = await page.$$eval("svg text", (els) => els.map((e) => e.textContent));
  out.scripts = await page.$$eval("script", (els) => els.length);
  if (shot) await page.screenshot({ path: shot, fullPage: false });
});
