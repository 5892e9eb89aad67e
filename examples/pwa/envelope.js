// The amsg envelope (AES-256-GCM under the user's key; {iv, authTag, encryptedData} in base64), for what the
// published client 2.5.0 has no method for: reading the outbox (page) and acknowledging a push (service worker).
// Both contexts have WebCrypto, so this one module serves both.

const toBase64 = (bytes) => btoa(String.fromCharCode(...bytes));
const fromBase64 = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0));

export function hexToBytes(hex) {
  return Uint8Array.from(hex.match(/../g), (pair) => parseInt(pair, 16));
}

async function aesKey(userKeyHex, usage) {
  return crypto.subtle.importKey("raw", hexToBytes(userKeyHex), { name: "AES-GCM" }, false, [usage]);
}

export async function encryptJson(value, userKeyHex) {
  const iv = crypto.getRandomValues(new Uint8Array(12));
  const plain = new TextEncoder().encode(JSON.stringify(value));
  const sealed = new Uint8Array(
    await crypto.subtle.encrypt({ name: "AES-GCM", iv }, await aesKey(userKeyHex, "encrypt"), plain),
  );
  return {
    iv: toBase64(iv),
    authTag: toBase64(sealed.slice(-16)),
    encryptedData: toBase64(sealed.slice(0, -16)),
  };
}

export async function decryptJson(envelope, userKeyHex) {
  const data = fromBase64(envelope.encryptedData);
  const tag = fromBase64(envelope.authTag);
  const sealed = new Uint8Array(data.length + tag.length);
  sealed.set(data);
  sealed.set(tag, data.length);
  const key = await aesKey(userKeyHex, "decrypt");
  const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: fromBase64(envelope.iv) }, key, sealed);
  return JSON.parse(new TextDecoder().decode(plain));
}

// A request with an encrypted body, as the server's encrypted routes expect it.
export async function sendEncrypted(config, method, path, value) {
  const response = await fetch(config.apiUrl + path, {
    method,
    headers: {
      "Content-Type": "application/json",
      "X-User-Id": config.userId,
      "X-Payload-Encrypted": "true",
      "X-Encryption-Version": "1",
    },
    body: JSON.stringify(await encryptJson(value, config.userKey)),
  });
  return response.json();
}

// A GET whose answer comes encrypted, decrypted here.
export async function getEncrypted(config, path) {
  const response = await fetch(config.apiUrl + path, {
    headers: { "X-User-Id": config.userId, "X-Response-Encrypted": "true", "X-Encryption-Version": "1" },
  });
  const body = await response.json();
  if (!body.success || body.encrypted !== true) return body;
  return { ...body, data: await decryptJson(body.data, config.userKey) };
}
