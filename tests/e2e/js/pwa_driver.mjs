// Drives the PWA example (examples/pwa) in headless Chromium for tests/e2e/test_pwa_example.py.
// Usage: node pwa_driver.mjs <chromiumPath> <pageUrl>
// Reads one JSON command per line on stdin, answers one JSON line per command on stdout:
//   {"click": id}             click a button, wait for the page's status line to report that step
//   {"fill": id, "value": s}  set an input or textarea
//   {"text": id}              an element's text
//   {"items": id}             the list's <li> elements: [{text, ...data attributes}]
//   {"waitItems": id, "count": n}  wait until the list holds n items
//   {"deliver": data}         hand a push (the decrypted Web Push body) to the page's service worker
//   {"close": true}
import { createInterface } from "node:readline";
import puppeteer from "puppeteer-core";

const [chromium, pageUrl] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
const logs = [];
page.on("console", (message) => logs.push(`${message.type()}: ${message.text()}`));
page.on("pageerror", (error) => logs.push(`pageerror: ${error.message}`));
await page.goto(pageUrl, { waitUntil: "load" });
await page.waitForFunction(() => document.getElementById("status").textContent.startsWith("ready"), {
  timeout: 30_000,
});

const cdp = await page.createCDPSession();
const registrations = new Map();
cdp.on("ServiceWorker.workerRegistrationUpdated", ({ registrations: updated }) => {
  for (const registration of updated) registrations.set(registration.registrationId, registration);
});
await cdp.send("ServiceWorker.enable");

const origin = new URL(pageUrl).origin;
const commands = {
  async click({ click: id }) {
    await page.$eval(`#${id}`, (button) => button.click());
    const status = await page.waitForFunction(
      (step) => {
        const text = document.getElementById("status").textContent;
        return (text.startsWith(`${step}:`) || text.startsWith(`${step} failed`)) && text;
      },
      { timeout: 60_000 },
      id,
    );
    return { status: await status.jsonValue() };
  },
  async fill({ fill: id, value }) {
    await page.$eval(`#${id}`, (element, text) => (element.value = text), value);
    return {};
  },
  async text({ text: id }) {
    return { text: await page.$eval(`#${id}`, (element) => element.textContent) };
  },
  async items({ items: id }) {
    const items = await page.$$eval(`#${id} li`, (lis) => lis.map((li) => ({ text: li.textContent, ...li.dataset })));
    return { items };
  },
  async waitItems({ waitItems: id, count }) {
    await page.waitForFunction((list, n) => document.querySelectorAll(`#${list} li`).length >= n, { timeout: 30_000 }, id, count);
    return commands.items({ items: id });
  },
  async deliver({ deliver: data }) {
    const live = [...registrations.values()].filter((r) => !r.isDeleted && r.scopeURL.startsWith(origin));
    if (live.length !== 1) throw new Error(`expected one service worker registration, found ${JSON.stringify(live)}`);
    await cdp.send("ServiceWorker.deliverPushMessage", { origin, registrationId: live[0].registrationId, data });
    return { registrationId: live[0].registrationId };
  },
};

const answer = (value) => process.stdout.write(JSON.stringify(value) + "\n");
answer({ ready: true });
for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line);
  if (command.close) break;
  const name = Object.keys(command)[0];
  try {
    answer({ ok: true, ...(await commands[name](command)) });
  } catch (error) {
    answer({ ok: false, error: error.message, logs: logs.slice(-20) });
  }
}
await browser.close();
