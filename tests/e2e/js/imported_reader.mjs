// Reads a user's imported data through the published reference client (@rei-standard/amsg-client).
// Usage: node imported_reader.mjs <baseUrl> <userId> <namespacesJson>
// Tasks through client.listMessages; client state, outbox and push subscription with the client's own key and
// envelope decryption (this client version has no methods for them; apps call them this way). Prints one JSON.
import { ReiClient } from "@rei-standard/amsg-client";

const [baseUrl, userId, namespacesJson] = process.argv.slice(2);
const client = new ReiClient({ baseUrl, userId });
await client.init();

async function getDecrypted(path) {
  const res = await fetch(`${baseUrl}${path}`, {
    headers: { "X-User-Id": userId, "X-Response-Encrypted": "true", "X-Encryption-Version": "1" },
  });
  const body = await res.json();
  if (body.success && body.encrypted) {
    return { status: res.status, data: await client._decrypt(body.data) };
  }
  return { status: res.status, data: body.data };
}

const out = { tasks: await client.listMessages({ limit: 100 }), state: {} };
for (const namespace of JSON.parse(namespacesJson)) {
  out.state[namespace] = await getDecrypted(`/client-state?namespace=${encodeURIComponent(namespace)}`);
}
out.outbox = await getDecrypted("/outbox?since=0&limit=100");
out.subscription = await getDecrypted("/push-subscription");
console.log(JSON.stringify(out));
