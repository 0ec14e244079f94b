// Run notebook 04 in JupyterLab, press the explorer's Run button, capture the explorer cell's output.
const { chromium } = require('playwright-core');
(async () => {
  const [port, token, out] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'] });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1600 } });
  await page.goto(`http://127.0.0.1:${port}/lab/workspaces/explorer/tree/notebooks/04_eager_vs_graph.ipynb?reset&token=${token}`);
  await page.waitForSelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell', { timeout: 60000 });
  await page.waitForTimeout(5000);
  await page.click('.lm-MenuBar-itemLabel:text("Kernel")');
  await page.click('.lm-Menu-itemLabel:text("Restart Kernel and Run All Cells")');
  await page.click('.jp-Dialog-button.jp-mod-accept');
  const button = page.locator('.widget-button:has-text("Run")');
  await button.waitFor({ timeout: 120000 });
  await page.waitForTimeout(2000);
  await button.click();
  await page.waitForFunction(() => /tokens:/.test(document.body.innerText) &&
    [...document.querySelectorAll('.widget-button')].some(b => b.textContent.trim() === 'Run' && !b.disabled), null, { timeout: 60000 });
  const cell = page.locator('.jp-Cell').filter({ has: page.locator('.widget-button') }).last();
  await cell.scrollIntoViewIfNeeded();
  const plot = cell.locator('.widget-output img').last();  // the step plot, once it is in view and decoded
  await plot.waitFor({ timeout: 60000 });
  await plot.evaluate(img => img.decode());
  await page.waitForTimeout(2000);
  // a first capture makes headless Chromium rasterize the whole area; the second is the one kept
  const area = cell.locator('.jp-Cell-outputWrapper');
  await area.screenshot({ path: out });
  await page.waitForTimeout(3000);
  await area.screenshot({ path: out });
  console.log('saved', out);
  await browser.close();
})();
