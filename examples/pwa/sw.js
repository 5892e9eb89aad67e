// The service worker: the published amsg-sw shows and dispatches each push, then this file acknowledges it in
// the server's outbox (POST /outbox/ack, encrypted under the user's key), so the app does not fetch it again.
// The page hands over {apiUrl, userId, userKey} after init; it is kept in IndexedDB because a service worker
// is stopped and restarted by the browser between pushes.
import { installReiSW } from "./vendor/amsg-sw.mjs";
import { sendEncrypted } from "./envelope.js";

const CONFIG_DB = "amsg-pwa-example";
let config = null;

function configStore(mode) {
  return new Promise((resolve, reject) => {
    const open = indexedDB.open(CONFIG_DB, 1);
    open.onupgradeneeded = () => open.result.createObjectStore("config");
    open.onerror = () => reject(open.error);
    open.onsuccess = () => resolve(open.result.transaction("config", mode).objectStore("config"));
  });
}

async function saveConfig(value) {
  const store = await configStore("readwrite");
  await new Promise((resolve, reject) => {
    const put = store.put(value, "current");
    put.onsuccess = resolve;
    put.onerror = () => reject(put.error);
  });
}

async function loadConfig() {
  if (config) return config;
  const store = await configStore("readonly");
  config = await new Promise((resolve) => {
    const get = store.get("current");
    get.onsuccess = () => resolve(get.result || null);
    get.onerror = () => resolve(null);
  });
  return config;
}

async function tellPages(message) {
  const pages = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const page of pages) page.postMessage(message);
}

async function acknowledge(payload) {
  const messageId = payload && payload.messageId;
  const current = await loadConfig();
  if (!messageId || !current) return;
  const answer = await sendEncrypted(current, "POST", "/outbox/ack", { messageIds: [messageId] });
  await tellPages({ type: "AMSG_DEMO_ACKED", messageId, ok: answer.success === true, answer });
  if (answer.success !== true) throw new Error(`outbox ack failed: ${JSON.stringify(answer.error)}`);
}

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));
self.addEventListener("message", (event) => {
  if (event.data && event.data.type === "AMSG_DEMO_CONFIG") {
    config = event.data.config;
    event.waitUntil(saveConfig(config));
  }
});

installReiSW(self, {
  defaultIcon: "./icon.svg",
  defaultBadge: "./icon.svg",
  onBusinessPayload: acknowledge,
});
