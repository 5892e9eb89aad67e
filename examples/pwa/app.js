// The page: the published client for init, scheduling, listing and cancelling; the service worker for pushes;
// envelope.js for the outbox (which client 2.5.0 does not cover).
import { ReiClient } from "./vendor/amsg-client.mjs";
import { getEncrypted, sendEncrypted } from "./envelope.js";

const $ = (id) => document.getElementById(id);
const settings = await (await fetch("./config.json")).json();
const apiUrl = new URLSearchParams(location.search).get("api") || settings.apiUrl;
const userId = localStorage.getItem("amsg-demo-user") || crypto.randomUUID();
localStorage.setItem("amsg-demo-user", userId);
const client = new ReiClient({ baseUrl: apiUrl, userId });
const config = { apiUrl, userId, userKey: null };
$("api").textContent = apiUrl;
$("user").textContent = userId;

function show(text) {
  $("status").textContent = text;
}

function item(list, text, attributes = {}) {
  const li = document.createElement("li");
  li.textContent = text;
  for (const [name, value] of Object.entries(attributes)) li.dataset[name] = value;
  $(list).prepend(li);
  return li;
}

// Every button runs one step and shows its outcome (or its error) in the status line.
function on(id, step) {
  $(id).addEventListener("click", async () => {
    show(`${id}…`);
    try {
      show(`${id}: ${JSON.stringify(await step())}`);
    } catch (error) {
      show(`${id} failed: ${error.message}`);
    }
  });
}

const registration = await navigator.serviceWorker.register("./sw.js", { type: "module" });
await navigator.serviceWorker.ready;

navigator.serviceWorker.addEventListener("message", (event) => {
  const message = event.data || {};
  if (message.type === "REI_AMSG_PUSH") {
    const push = message.payload || {};
    item("pushes", `${push.title || push.contactName || ""}: ${push.message ?? ""}`, {
      messageId: push.messageId || "",
      event: message.event || "",
    });
  } else if (message.type === "AMSG_DEMO_ACKED") {
    item("acks", `acknowledged ${message.messageId}: ${message.ok ? "ok" : "failed"}`, {
      messageId: message.messageId,
      ok: String(message.ok),
    });
  }
});

async function shareWithWorker() {
  const worker = registration.active || (await navigator.serviceWorker.ready).active;
  worker.postMessage({ type: "AMSG_DEMO_CONFIG", config });
}

on("init", async () => {
  await client.init();
  const answer = await (await fetch(`${apiUrl}/get-user-key`, { headers: { "X-User-Id": userId } })).json();
  config.userKey = answer.data.userKey;
  await shareWithWorker();
  return { initialised: true };
});

async function registerSubscription(subscription) {
  const answer = await sendEncrypted(config, "PUT", "/push-subscription", { subscription });
  if (!answer.success) throw new Error(JSON.stringify(answer.error));
  return answer.data;
}

on("subscribe", async () => {
  const key = await (await fetch(`${apiUrl}/vapid-public-key`)).json();
  try {
    const subscription = await client.subscribePush(key.publicKey, registration);
    return registerSubscription(subscription.toJSON());
  } catch (error) {
    $("manual").open = true; // no push service (or no permission): the manual way stays
    throw error;
  }
});

on("use-subscription", async () => registerSubscription(JSON.parse($("subscription").value)));

function schedule(extra) {
  return client.scheduleMessage({ contactName: "Rei", userMessage: $("text").value, ...extra });
}

const inSeconds = (seconds) => new Date(Date.now() + seconds * 1000).toISOString();
const inOneMinute = () => inSeconds(60);
on("schedule-fixed", () => schedule({ messageType: "fixed", firstSendTime: inOneMinute() }));
// an instant message is pushed at once; its firstSendTime must still lie ahead
on("schedule-instant", () => schedule({ messageType: "instant", firstSendTime: inSeconds(5) }));
on("schedule-daily", () =>
  schedule({ messageType: "fixed", recurrenceType: "daily", firstSendTime: inOneMinute() }),
);
on("tick", async () => (await fetch(`${apiUrl}/_local/tick`, { method: "POST" })).json());

on("list", async () => {
  const answer = await client.listMessages();
  $("messages").replaceChildren();
  for (const task of answer.data.tasks) {
    const li = item("messages", `${task.nextSendAt} ${task.recurrenceType} ${task.status} `, { uuid: task.uuid });
    const cancel = document.createElement("button");
    cancel.textContent = "cancel";
    cancel.id = `cancel-${task.uuid}`;
    li.append(cancel);
    on(cancel.id, async () => {
      const cancelled = await client.cancelMessage(task.uuid);
      if (cancelled.success) li.remove();
      return cancelled;
    });
  }
  return { tasks: answer.data.tasks.length };
});

on("outbox-refresh", async () => {
  const answer = await getEncrypted(config, "/outbox?since=0&limit=50");
  $("outbox").replaceChildren();
  for (const entry of answer.data.entries) {
    item("outbox", `${entry.messageId}: ${entry.push?.message ?? ""}`, { messageId: entry.messageId });
  }
  return { unacknowledged: answer.data.entries.length };
});

show("ready: Init first");
