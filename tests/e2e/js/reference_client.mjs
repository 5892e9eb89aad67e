// Drives the published reference client (@rei-standard/amsg-client) against a running amsg-aws base URL.
// Usage: node reference_client.mjs <baseUrl> <userId> <subscriptionJson> <firstSendTime>
// Prints one JSON object with every response, for the Python test to assert on.
import { ReiClient } from "@rei-standard/amsg-client";

const [baseUrl, userId, subscriptionJson, firstSendTime] = process.argv.slice(2);
const client = new ReiClient({ baseUrl, userId });
const out = {};

await client.init();
out.initialised = client._userKey instanceof Uint8Array && client._userKey.length === 32;

// push-subscription is not a method of this client version: send it the way apps do, with the client's
// own envelope encryption
const encrypted = await client._encrypt(JSON.stringify({ subscription: JSON.parse(subscriptionJson) }));
const put = await fetch(`${baseUrl}/push-subscription`, {
  method: "PUT",
  headers: {
    "Content-Type": "application/json",
    "X-User-Id": userId,
    "X-Payload-Encrypted": "true",
    "X-Encryption-Version": "1",
  },
  body: JSON.stringify(encrypted),
});
out.subscription = await put.json();

out.scheduled = await client.scheduleMessage({
  contactName: "Rei",
  messageType: "fixed",
  userMessage: "来自参考客户端。你好！",
  firstSendTime,
  avatarUrl: "data:image/png;base64,AAAA", // the client soft-strips this itself
  metadata: { charId: "js" },
});
out.listed = await client.listMessages({ limit: 5 });
out.updated = await client.updateMessage(out.scheduled.data.uuid, { contactName: "Rei (JS)" });
out.listedAfterUpdate = await client.listMessages();
out.invalid = await client.scheduleMessage({ contactName: "Rei", messageType: "nope" });
out.second = await client.scheduleMessage({ contactName: "Rei", messageType: "fixed", userMessage: "bye", firstSendTime });
out.cancelled = await client.cancelMessage(out.second.data.uuid);
console.log(JSON.stringify(out));
