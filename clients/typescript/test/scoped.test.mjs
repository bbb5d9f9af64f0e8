// A scoped token (`memjobs token issue`) against a real memjobs API: run by tests/http/test_tokens.py,
// which starts a server with MEMJOBS_API_TOKEN_KEY and sets MEMJOBS_API_URL, MEMJOBS_SCOPED_TOKEN (read and
// write for MEMJOBS_SCOPED_OWNER only) and MEMJOBS_READ_TOKEN (read only, same owner).
// Skipped without MEMJOBS_SCOPED_TOKEN.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemjobsApiError, MemjobsClient } from "../src/index.js";

const baseUrl = process.env.MEMJOBS_API_URL;
const skip = baseUrl && process.env.MEMJOBS_SCOPED_TOKEN ? false : "MEMJOBS_SCOPED_TOKEN is unset";
const ownerId = process.env.MEMJOBS_SCOPED_OWNER;

async function refused(call, status, reason) {
  await assert.rejects(call, (err) => {
    assert.ok(err instanceof MemjobsApiError);
    assert.equal(err.status, status);
    assert.equal(err.reason, reason);
    return true;
  });
}

test("a scoped token acts for its owner, within its scopes, and for no one else", { skip }, async () => {
  const scoped = new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_SCOPED_TOKEN });
  const reader = new MemjobsClient({ baseUrl, token: process.env.MEMJOBS_READ_TOKEN });
  const { status } = await scoped.remember({ ownerId, text: "prefers oolong" });
  assert.equal(status, "queued");
  assert.ok(Array.isArray((await reader.sources({ ownerId })).sources));
  await refused(() => scoped.remember({ ownerId: `${ownerId}-other`, text: "prefers oolong" }), 403, "forbidden");
  await refused(() => scoped.sources({ ownerId: `${ownerId}-other` }), 403, "forbidden");
  await refused(() => reader.remember({ ownerId, text: "prefers oolong" }), 403, "forbidden");
  const stranger = new MemjobsClient({ baseUrl, token: `${process.env.MEMJOBS_SCOPED_TOKEN}x` });
  await refused(() => stranger.sources({ ownerId }), 401, "unauthorized");
});
