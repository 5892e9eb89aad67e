// V8's side of the splitPattern differential test (tests/unit/test_split_v8_differential.py).
// One process per test session: reads one JSON case per line on stdin, writes one JSON answer per line.
// Case: {"patterns": [source, ...], "text": "..."}. Answer: {"error": "..."} when `new RegExp` (no flags)
// refuses a source, else {"raw": text.split(first) with undefined as null, "segments": [...]}.
// "segments" applies the project's documented rule to V8's split result (docs/compatibility.md,
// "splitPattern"): each piece trimmed, followed by every capture of the separator after it that is a non-empty
// string (an undefined or empty capture adds nothing); blank pieces dropped with their separator; a step that
// keeps nothing returns its chunk whole; patterns cascade.
import { createInterface } from "node:readline";

function groupCount(re) {
  return new RegExp(`${re.source}|`).exec("").length - 1;
}

function splitStep(chunk, re) {
  const parts = chunk.split(re);
  const stride = groupCount(re) + 1;
  const out = [];
  for (let i = 0; i < parts.length; i += stride) {
    const piece = (parts[i] ?? "").trim();
    if (!piece) continue;
    let segment = piece;
    for (let j = i + 1; j < i + stride && j < parts.length; j += 1) {
      if (typeof parts[j] === "string") segment += parts[j];
    }
    out.push(segment);
  }
  return out.length ? out : [chunk];
}

function answer(testCase) {
  let regexes;
  try {
    regexes = testCase.patterns.map((source) => new RegExp(source));
  } catch (error) {
    return { error: String(error.message) };
  }
  const raw = testCase.text.split(regexes[0]).map((part) => (part === undefined ? null : part));
  let chunks = [testCase.text];
  for (const re of regexes) chunks = chunks.flatMap((chunk) => splitStep(chunk, re));
  return { raw, segments: chunks.length ? chunks : [testCase.text] };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (line) process.stdout.write(`${JSON.stringify(answer(JSON.parse(line)))}\n`);
}
