// usage: node shoot.js PORT TOKEN OUTDIR nb1.ipynb [nb2.ipynb ...]: each notebook opened in JupyterLab, whole page
const { chromium } = require('playwright-core');
(async () => {
  const [port, token, outdir, ...nbs] = process.argv.slice(2);
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync'] });
  for (const nb of nbs) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
    await page.goto(`http://127.0.0.1:${port}/lab/workspaces/shot-${nb.slice(0,2)}/tree/notebooks/${nb}?reset&token=${token}`);
    await page.waitForSelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell', { timeout: 60000 });
    await page.waitForFunction(() => document.querySelector('.jp-Notebook-ExecutionIndicator[data-status="idle"]')
      || /Idle/.test(document.querySelector('.jp-StatusBar-Widget')?.textContent || ''), null, { timeout: 60000 }).catch(() => {});
    await page.waitForTimeout(4000);
    // close popups (news notification)

    const measure = () => page.evaluate(() => {
      const outer = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')][0];
      if (!outer) return -1;
      const cells = [...outer.querySelectorAll('.jp-Cell')];
      const top = outer.getBoundingClientRect().top - outer.scrollTop;
      return Math.ceil(Math.max(...cells.map(c => c.getBoundingClientRect().bottom)) - top) + 60;
    });
    let h = await measure();
    for (let i = 0; i < 6; i++) {
      await page.setViewportSize({ width: 1400, height: Math.min(h + 250, 20000) });
      await page.waitForTimeout(2500);
      const h2 = await measure();
      if (h2 === h) break;
      h = h2;
    }
    const modified = await page.evaluate(() => !!document.querySelector('.jp-mod-current.jp-mod-dirty, .lm-TabBar-tab.jp-mod-current.jp-mod-dirty'));
    await page.screenshot({ path: `${outdir}/${nb.replace('.ipynb', '.png')}` });
    console.log(nb, 'height', h, 'dirty', modified);
    await page.close();
  }
  await browser.close();
})();
