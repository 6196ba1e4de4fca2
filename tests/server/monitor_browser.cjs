// tests/server/monitor_browser.cjs - opens tandem-server's /monitor in headless Chromium through
// puppeteer-core: enters the API key, waits for the charts to get points and the slot table to
// show busy slots, saves a screenshot, and prints what it saw as one JSON line.
// Usage: node monitor_browser.cjs NPM_DIR CHROMIUM URL KEY SCREENSHOT
const path = require("path");
const [npmDir, chromium, url, key, screenshot] = process.argv.slice(2);
const puppeteer = require(path.join(npmDir, "node_modules", "puppeteer-core"));

async function main() {
  const browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Root in a container has no user namespaces for Chromium's sandbox.
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
  });
  const seen = { console_errors: [], page_errors: [] };
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: 1280, height: 900 });
    page.on("console", (m) => { if (m.type() === "error") seen.console_errors.push(m.text()); });
    page.on("pageerror", (e) => seen.page_errors.push(String(e)));
    const res = await page.goto(url + "/monitor", { waitUntil: "load", timeout: 30000 });
    seen.page_status = res.status();
    seen.csp = res.headers()["content-security-policy"] || "";
    await page.waitForSelector("#login:not(.hidden)", { timeout: 15000 });
    seen.asked_for_key = true;
    await page.type("#key", key);
    await page.click("#login button");
    await page.waitForSelector("#app:not(.hidden)", { timeout: 15000 });
    seen.key_stored = await page.evaluate(() => sessionStorage.getItem("tandem-monitor-key") !== null);
    await page.waitForFunction(() => Number(document.getElementById("decode-chart").dataset.points || 0) >= 2 &&
                               Number(document.getElementById("decode-chart").dataset.peak || 0) > 0, { timeout: 60000 });
    await page.waitForFunction(() => document.querySelectorAll("#slots tr.busy").length >= 1, { timeout: 60000 });
    Object.assign(seen, await page.evaluate(() => ({
      decode_points: Number(document.getElementById("decode-chart").dataset.points),
      prefill_points: Number(document.getElementById("prefill-chart").dataset.points),
      decode_peak: Number(document.getElementById("decode-chart").dataset.peak),
      busy_rows: document.querySelectorAll("#slots tr.busy").length,
      slot_rows: document.querySelectorAll("#slots tr").length,
      device_cells: [...document.querySelectorAll("#devices tr td")].map((td) => td.textContent),
      busy_states: [...document.querySelectorAll("#slots tr.busy td:nth-child(2)")].map((td) => td.textContent),
      model: document.getElementById("model").textContent,
      layout: document.getElementById("layout").textContent,
      ttft: document.getElementById("ttft").textContent,
    })));
    await page.screenshot({ path: screenshot, fullPage: true });
  } catch (e) {
    seen.failure = String(e);
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(seen));
}

main();
