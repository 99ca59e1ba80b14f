// The workbench of an imported PyTorch model in JupyterLab (issue 10): run to the end in the
// simulator panel shows the match against PyTorch eager, and a step shows the buffers' real
// values. Started by test_workbench_browser.py on its JupyterLab; prints one JSON line of
// results and exits 1 on the first failed check.
//
// Usage: node imported_e2e.mjs <lab url of the notebook> <artifacts dir>

import { mkdirSync } from "node:fs";
import { join } from "node:path";

import { checker, launch } from "./chromium.mjs";

const [url, artifacts] = process.argv.slice(2);
mkdirSync(artifacts, { recursive: true });
const results = { checks: [], console_errors: [] };
const t0 = Date.now();
const log = (msg) =>
  process.stderr.write(
    `[imported ${((Date.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`,
  );
const check = checker(results, log);

const browser = await launch();
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
page.on(
  "console",
  (m) => m.type() === "error" && results.console_errors.push(m.text()),
);
page.on("pageerror", (e) =>
  results.console_errors.push(`pageerror: ${e.message}`),
);

async function py(code) {
  return page.evaluate(async (code) => {
    const kernel =
      window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    let out = "";
    const future = kernel.requestExecute({ code, store_history: false });
    future.onIOPub = (msg) => {
      if (msg.header.msg_type === "stream") out += msg.content.text;
      if (msg.header.msg_type === "error")
        out += `PYERROR ${msg.content.ename}: ${msg.content.evalue}`;
    };
    await future.done;
    return out.trim();
  }, code);
}

try {
  await page.goto(url);
  await page.waitForFunction(
    () =>
      window.jupyterapp?.shell?.currentWidget?.sessionContext?.session?.kernel
        ?.status === "idle",
    null,
    { timeout: 60000 },
  );
  // Under load the first run-all can land before the notebook's context is ready and run
  // nothing: run again until the cell's prompt shows it ran ([*] or a count).
  for (let attempt = 0; ; attempt++) {
    await page.evaluate(() => {
      const app = window.jupyterapp;
      app.shell.activateById(app.shell.currentWidget.id); // run-all runs the active notebook
      return app.commands.execute("notebook:run-all-cells");
    });
    const ran = await page
      .waitForFunction(
        () =>
          /\[(\*|\d+)\]/.test(
            document.querySelector(".jp-Notebook .jp-InputPrompt")
              ?.textContent ?? "",
          ),
        null,
        { timeout: 30000 },
      )
      .then(() => true, () => false);
    if (ran) break;
    if (attempt >= 2) throw new Error("the notebook's cell never ran (3 run-all attempts)");
    log("the cell did not run; run all again");
  }
  const w = page.locator(".ow-root").first();
  await page
    .locator('.ow-root[data-passes="ready"]')
    .first()
    .waitFor({ timeout: 120000 });
  log("workbench drawn, passes ready");
  await w.locator('.ow-side .ow-tab[data-tab="sim"]').click();
  const model = w.locator('.ow-model[data-bound="true"]');
  await model.waitFor({ timeout: 15000 });
  check(
    "the simulator panel says it computes the model's own values",
    /values: Sequential's own/.test(await model.textContent()),
    await model.textContent(),
  );

  await w.locator(".ow-sim-step").click();
  await w.locator(".ow-touched-row").first().waitFor({ timeout: 15000 });
  const rows = await w.locator(".ow-touched-row").allTextContents();
  const x0 = await py(
    "import numpy as np; print(f\"{float(np.asarray(w.model.inputs['input']).ravel()[0]):.4g}\")",
  );
  const inputRow = rows.find((r) => r.startsWith("input"));
  check(
    "a step shows the real values of the buffers it touched",
    !!inputRow && inputRow.includes(x0),
    `${x0} in ${inputRow}`,
  );

  await w.locator(".ow-sim-run").click();
  const verdict = w.locator('.ow-eager[data-match="true"]');
  await verdict.waitFor({ timeout: 30000 });
  const text = await verdict.textContent();
  const kernelSide = await py(
    "print(w.sim_state['eager']['match'], len(w.model.outputs))",
  );
  const cells = await verdict
    .locator('.ow-eager-row[data-allclose="true"]')
    .count();
  check(
    "running to the end shows the match against PyTorch eager, per output",
    /✓ matches PyTorch eager/.test(text) &&
      /rtol 1\.3e-6 · atol 1e-5/.test(text) &&
      kernelSide === `True ${cells}`,
    `${text} | kernel: ${kernelSide} | rows ${cells}`,
  );
  await w
    .locator(".ow-sim")
    .screenshot({ path: join(artifacts, "imported_eager.png") });
  const bad = results.console_errors.filter((e) =>
    /oxiwork|widget\.js|ow-|anywidget/i.test(e),
  );
  check(
    "no widget errors in the browser console",
    bad.length === 0,
    bad.join(" | "),
  );
  results.ok = true;
} catch (e) {
  results.ok = false;
  results.error = String(e?.stack || e);
  try {
    await page.screenshot({ path: join(artifacts, "imported_failure.png") });
  } catch {
    /* the page may be gone */
  }
} finally {
  try {
    await page.evaluate(() =>
      window.jupyterapp?.shell?.currentWidget?.sessionContext?.shutdown(),
    );
  } catch {
    /* best effort */
  }
  await browser.close();
  results.seconds = (Date.now() - t0) / 1000;
  process.stdout.write(JSON.stringify(results) + "\n");
  process.exit(results.ok ? 0 : 1);
}
