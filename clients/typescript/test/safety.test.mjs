// URL rules and the response cap, against a local Node HTTP server (no memjobs needed).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { MemjobsApiError, MemjobsClient, checkBaseUrl, isLoopbackHost } from "../src/index.js";

test("plain HTTP is refused off loopback; HTTPS and loopback HTTP are accepted", () => {
  for (const url of ["http://example.com", "http://10.0.0.5:8780", "http://[::2]:80", "http://127.0.0.1.evil.com",
    "ftp://127.0.0.1", "not a url", "https://user:pw@example.com", "http://localhost:1/?x=1"]) {
    assert.throws(() => new MemjobsClient({ baseUrl: url }), (e) => e instanceof MemjobsApiError && e.reason === "insecure_url", url);
  }
  for (const url of ["https://memjobs.example.com", "http://127.0.0.1:8780", "http://127.3.4.5", "http://localhost:8780", "http://[::1]:8780/"]) {
    assert.ok(checkBaseUrl(url), url);
  }
  assert.equal(isLoopbackHost("127.0.0.256"), false);
});

async function withServer(handler, body) {
  const server = createServer(handler);
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    return await body(`http://127.0.0.1:${server.address().port}`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
}

test("a response over the cap is refused, declared or streamed", async () => {
  await withServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json", "content-length": "5000" });
    res.end("[" + "1,".repeat(2499) + "1]");
  }, async (url) => {
    const client = new MemjobsClient({ baseUrl: url, maxResponseBytes: 1000 });
    await assert.rejects(client.health(), (e) => e.reason === "response_too_large");
  });
  await withServer((req, res) => {
    res.writeHead(200, { "content-type": "application/json" });  // chunked, no length
    let sent = 0;
    const more = () => {
      if (sent++ > 50) return res.end("0]");
      res.write("0,".repeat(500), more);
    };
    res.write("[", more);
  }, async (url) => {
    const client = new MemjobsClient({ baseUrl: url, maxResponseBytes: 4096 });
    await assert.rejects(client.health(), (e) => e.reason === "response_too_large");
  });
});

test("redirects are not followed and problems become MemjobsApiError", async () => {
  await withServer((req, res) => {
    if (req.url === "/healthz") {
      res.writeHead(302, { location: "http://example.com/" });
      return res.end();
    }
    res.writeHead(503, { "content-type": "application/problem+json", "retry-after": "1" });
    res.end(JSON.stringify({ type: "urn:memjobs:problem:overloaded", title: "busy", status: 503, reason: "overloaded" }));
  }, async (url) => {
    const client = new MemjobsClient({ baseUrl: url });
    await assert.rejects(client.health(), (e) => e instanceof MemjobsApiError && e.reason === "network");
    await assert.rejects(client.ready(), (e) => e.status === 503 && e.reason === "overloaded" && e.type === "urn:memjobs:problem:overloaded");
  });
});

test("a call that outlasts the timeout is aborted", async () => {
  await withServer(() => { /* never answers */ }, async (url) => {
    const client = new MemjobsClient({ baseUrl: url, timeoutMs: 200 });
    await assert.rejects(client.health(), (e) => e.reason === "timeout");
  });
});
