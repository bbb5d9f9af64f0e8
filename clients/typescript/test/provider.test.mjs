// The seeds' MemoryProvider rules, run against memjobs' provider and a real memjobs API: run by
// tests/gateway/test_gateway_typescript.py (MEMJOBS_API_URL, the tokens). Skipped without a server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemjobsApiError, MemjobsClient } from "../src/index.js";
import { until } from "./polling.mjs";
import { MEMORY_PROVIDER_PROTOCOL_VERSION, PROTOCOL_VERSION, MemjobsMemoryProvider } from "../src/provider.js";

const baseUrl = process.env.MEMJOBS_API_URL;
const skip = baseUrl ? false : "MEMJOBS_API_URL is unset (tests/gateway/test_gateway_typescript.py starts a server)";
const token = process.env.MEMJOBS_API_GATEWAY_TOKEN || undefined;

/** A fetch that records each reply's status for the conditional GETs. */
function recordingFetch() {
  const statuses = [];
  const fetchImpl = async (url, init) => {
    const response = await fetch(url, init);
    if (String(url).endsWith("/v1/memory/documents")) statuses.push(response.status);
    return response;
  };
  return { statuses, fetchImpl };
}

test("describe() answers the seed's shape and version constant", { skip }, async () => {
  const provider = new MemjobsMemoryProvider({ baseUrl, token, key: "company-memory", label: "Company Memory" });
  assert.equal(PROTOCOL_VERSION, MEMORY_PROVIDER_PROTOCOL_VERSION);
  assert.deepEqual(provider.describe(), { protocolVersion: MEMORY_PROVIDER_PROTOCOL_VERSION, key: "company-memory", label: "Company Memory" });
  const served = await new MemjobsClient({ baseUrl, token }).memoryDocuments({ ownerId: `ts-${randomUUID()}` });
  assert.equal(served.provider.protocolVersion, MEMORY_PROVIDER_PROTOCOL_VERSION); // the server speaks the same protocol
  await provider.close();
});

test("list() is synchronous: a cold owner is [] and starts the fetch; the written documents follow", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const writer = new MemjobsClient({ baseUrl, token });
  await writer.editMemory({ ownerId, edits: [{ op: "append", doc: "MEMORY.md", text: "- 住在杭州" }, { op: "append", doc: "USER.md", text: "- 叫我小林" }] });
  const provider = new MemjobsMemoryProvider({ baseUrl, token, refreshMs: 60_000 });
  const cold = provider.list(ownerId, {});
  assert.ok(Array.isArray(cold), "list() returns an array, not a promise");
  assert.deepEqual(cold, []);
  const warm = await until(() => provider.list(ownerId).length === 2 && provider.list(ownerId), "the first fetch");
  assert.deepEqual(warm, [
    { doc: "USER.md", scope: "user", content: "- 叫我小林", version: 1 },
    { doc: "MEMORY.md", scope: "memory", content: "- 住在杭州", version: 1 },
  ]);
  // Bounded as the gateway asks: documents and characters.
  assert.deepEqual(provider.list(ownerId, { maxDocs: 1, maxChars: 3 }), [{ doc: "USER.md", scope: "user", content: "- 叫", version: 1 }]);
  assert.equal(provider.list(ownerId, undefined).length, 2);
  assert.equal(provider.list(ownerId, null).length, 2);
  assert.equal(provider.health().ok, true);
  await provider.close();
});

test("apply() writes through /v1/memory/edits, answers {changed, documents}, and list() has it at once", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const provider = new MemjobsMemoryProvider({ baseUrl, token, refreshMs: 60_000 });
  await provider.refresh(ownerId);
  assert.deepEqual(provider.list(ownerId), []);
  const context = { source: "realtime", session: "s-1", turn: "t-1", trace: "tr-1" };
  const applied = await provider.apply(ownerId, [{ op: "append", doc: "MEMORY.md", text: "- 喜欢喝茶" }, { op: "append", doc: "MEMORY.md", text: "- 住在杭州" }], context);
  assert.equal(applied.changed, 1);
  assert.deepEqual(applied.documents, [{ doc: "MEMORY.md", scope: "memory", content: "- 喜欢喝茶\n- 住在杭州", version: 1 }]);
  assert.deepEqual(provider.list(ownerId), applied.documents);
  const replaced = await provider.apply(ownerId, [{ op: "replace", doc: "MEMORY.md", oldText: "杭州", newText: "上海" }], context);
  assert.deepEqual(provider.list(ownerId)[0], replaced.documents[0]);
  assert.equal(provider.list(ownerId)[0].content, "- 喜欢喝茶\n- 住在上海");
  await assert.rejects(provider.apply(ownerId, [{ op: "replace", doc: "MEMORY.md", old_text: "北京", new_text: "x" }], context),
    (e) => e instanceof MemjobsApiError && e.reason === "not_found");
  await assert.rejects(provider.apply(ownerId, [{ op: "append", doc: "ASSISTANT.md", text: "- be rude" }], context),
    (e) => e instanceof MemjobsApiError && e.reason === "forbidden_document");
  await assert.rejects(provider.apply(ownerId, [{ doc: "MEMORY.md", content: "whole" }], context), (e) => e.reason === "validation");
  assert.equal(provider.list(ownerId)[0].version, 2); // refusals wrote nothing
  await provider.close();
});

test("the cache is kept fresh by conditional GETs: 304 while unchanged, the new version once changed elsewhere", { skip }, async () => {
  const ownerId = `ts-${randomUUID()}`;
  const { statuses, fetchImpl } = recordingFetch();
  let clock = 0;
  const provider = new MemjobsMemoryProvider({ baseUrl, token, fetch: fetchImpl, refreshMs: 1000, now: () => clock });
  await provider.refresh(ownerId);
  clock += 1000;
  provider.list(ownerId); // stale: revalidates in the background
  await until(() => statuses.length === 2, "the revalidation");
  assert.deepEqual(statuses, [200, 304]);
  await new MemjobsClient({ baseUrl, token }).editMemory({ ownerId, context: { source: "consolidation" },
    edits: [{ op: "append", doc: "USER.md", text: "- reply briefly" }] });
  clock += 1000;
  provider.list(ownerId);
  const fresh = await until(() => provider.list(ownerId)[0]?.content === "- reply briefly" && provider.list(ownerId), "the change");
  assert.equal(fresh[0].version, 1);
  assert.deepEqual(statuses, [200, 304, 200]);
  provider.list(ownerId); // fresh again: no request
  assert.equal(statuses.length, 3);
  await provider.close();
});

test("the cache holds at most maxOwners owners, the least recently listed dropped first", { skip }, async () => {
  const [a, b, c] = [1, 2, 3].map(() => `ts-${randomUUID()}`);
  const writer = new MemjobsClient({ baseUrl, token });
  for (const ownerId of [a, b, c]) await writer.editMemory({ ownerId, edits: [{ op: "append", doc: "MEMORY.md", text: `- ${ownerId}` }] });
  const provider = new MemjobsMemoryProvider({ baseUrl, token, maxOwners: 2, refreshMs: 60_000 });
  await provider.refresh(a);
  await provider.refresh(b);
  assert.equal(provider.list(a).length, 1); // a is now the most recent: b goes first
  await provider.refresh(c);
  assert.deepEqual([...provider.cache.keys()], [a, c]);
  assert.equal(provider.list(a)[0].content, `- ${a}`);
  assert.deepEqual(provider.list(b), []); // dropped: cold again (its fetch starts; c goes)
  assert.deepEqual([...provider.cache.keys()], [a, b]);
  await provider.close();
});

test("health() and close(): a failing server is not ok; closed lists nothing, refuses writes, closes twice", { skip }, async () => {
  const attempts = [];
  let clock = 0;
  const broken = new MemjobsMemoryProvider({ baseUrl: "http://127.0.0.1:9", refreshMs: 5000, now: () => clock,
    fetch: async (url, init) => { attempts.push(url); return fetch(url, init); } });
  await assert.rejects(broken.refresh("someone"), (e) => e.reason === "network");
  assert.equal(broken.health().ok, false);
  assert.deepEqual(broken.list("someone"), []);
  assert.equal(attempts.length, 1); // a server that is down is not asked again at every list()
  clock += 5000;
  broken.list("someone");
  assert.equal(attempts.length, 2); // but again refreshMs later
  await broken.close();
  const provider = new MemjobsMemoryProvider({ baseUrl, token });
  const ownerId = `ts-${randomUUID()}`;
  await provider.refresh(ownerId);
  await provider.close();
  await provider.close();
  assert.deepEqual(provider.health(), { ok: false, detail: "closed" });
  assert.deepEqual(provider.list(ownerId), []);
  await assert.rejects(provider.apply(ownerId, [{ op: "append", doc: "USER.md", text: "- x" }]), (e) => e.reason === "closed");
});
