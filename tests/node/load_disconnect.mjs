// Load and client-disconnect test for an OpenAI-compatible server, through the official openai
// SDK: waits for GET /health, opens N concurrent streaming chat completions, aborts half of them
// after their first chunks, checks the rest finish cleanly, then polls GET /metrics until no
// request runs and the KV cache is empty again (aborted requests must free their blocks).
//
// usage: node load_disconnect.mjs --base-url http://127.0.0.1:PORT --model NAME
//          [--requests 64] [--abort 32] [--max-tokens 32] [--abort-after-chunks 2]
//          [--health-retries 600] [--metrics-retries 120] [--request-timeout-ms 600000]
// Prints PASS or FAIL (with reasons) and exits 0 or 1.
import OpenAI from "openai";

import { metricValue } from "./prometheus.mjs";

function parseArgs(argv) {
  const opts = {
    baseUrl: "",
    model: "",
    requests: 64,
    abort: 32,
    maxTokens: 32,
    abortAfterChunks: 2,
    healthRetries: 600,
    metricsRetries: 120,
    requestTimeoutMs: 600000,
  };
  const numeric = {
    "--requests": "requests",
    "--abort": "abort",
    "--max-tokens": "maxTokens",
    "--abort-after-chunks": "abortAfterChunks",
    "--health-retries": "healthRetries",
    "--metrics-retries": "metricsRetries",
    "--request-timeout-ms": "requestTimeoutMs",
  };
  for (let i = 2; i < argv.length; i += 2) {
    const flag = argv[i];
    const value = argv[i + 1];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === "--base-url") opts.baseUrl = value.replace(/\/+$/, "");
    else if (flag === "--model") opts.model = value;
    else if (flag in numeric) {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 0) throw new Error(`${flag} expects an integer, got ${value}`);
      opts[numeric[flag]] = n;
    } else throw new Error(`unknown flag ${flag}`);
  }
  if (!opts.baseUrl || !opts.model) throw new Error("--base-url and --model are required");
  if (opts.abort * 2 > opts.requests) throw new Error("--abort cannot exceed half of --requests");
  return opts;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitForHealth(baseUrl, retries) {
  for (let i = 0; i < retries; i++) {
    try {
      const res = await fetch(`${baseUrl}/health`);
      if (res.status === 200) return true;
    } catch {
      // not listening yet
    }
    await sleep(500);
  }
  return false;
}

// One streaming request; when `abortAfter` > 0 it aborts after that many chunks.
async function runOne(client, opts, index, abortAfter) {
  const controller = new AbortController();
  const outcome = { index, chunks: 0, text: "", finishReason: null, aborted: false, error: null };
  try {
    const stream = await client.chat.completions.create(
      {
        model: opts.model,
        messages: [{ role: "user", content: `Write a long story about request ${index}.` }],
        max_tokens: opts.maxTokens,
        stream: true,
        ignore_eos: true,
      },
      { signal: controller.signal },
    );
    for await (const chunk of stream) {
      const choice = chunk.choices?.[0];
      if (!choice) continue;
      outcome.chunks += 1;
      outcome.text += choice.delta?.content ?? "";
      if (choice.finish_reason) outcome.finishReason = choice.finish_reason;
      if (abortAfter > 0 && outcome.chunks >= abortAfter) {
        controller.abort();
        outcome.aborted = true;
        break;
      }
    }
  } catch (err) {
    if (abortAfter > 0 && (err instanceof OpenAI.APIUserAbortError || err?.name === "AbortError")) {
      outcome.aborted = true;
    } else {
      outcome.error = `${err?.name ?? "Error"}: ${err?.message ?? err}`;
    }
  }
  return outcome;
}

async function main() {
  const opts = parseArgs(process.argv);
  const failures = [];
  if (!(await waitForHealth(opts.baseUrl, opts.healthRetries))) {
    console.log(`FAIL: ${opts.baseUrl}/health never answered 200 (${opts.healthRetries} tries)`);
    process.exit(1);
  }
  const client = new OpenAI({
    apiKey: process.env.OPENAI_API_KEY || "EMPTY",
    baseURL: `${opts.baseUrl}/v1`,
    maxRetries: 0,
    timeout: opts.requestTimeoutMs,
  });

  const started = Date.now();
  const outcomes = await Promise.all(
    Array.from({ length: opts.requests }, (_, i) =>
      // Every other request (odd indices) is aborted, so aborts interleave with finishing ones.
      runOne(client, opts, i, i % 2 === 1 && i < 2 * opts.abort ? opts.abortAfterChunks : 0),
    ),
  );
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  const aborted = outcomes.filter((o) => o.aborted);
  const finished = outcomes.filter((o) => !o.aborted);
  const errors = outcomes.filter((o) => o.error);
  console.log(
    `requests: ${opts.requests}, aborted: ${aborted.length}, finished: ${finished.length}, ` +
      `errors: ${errors.length} (${seconds} s)`,
  );
  for (const o of errors.slice(0, 5)) console.log(`  request ${o.index}: ${o.error}`);
  if (aborted.length !== opts.abort) failures.push(`expected ${opts.abort} aborted streams, got ${aborted.length}`);
  if (errors.length) failures.push(`${errors.length} request(s) failed`);
  for (const o of finished) {
    if (o.error) continue;
    if (!o.finishReason) failures.push(`request ${o.index} ended without a finish_reason`);
    if (o.chunks === 0) failures.push(`request ${o.index} streamed no chunks`);
  }

  // Aborted requests must leave the scheduler and free their KV blocks.
  let running = null;
  let kvUsage = null;
  let clean = false;
  for (let i = 0; i < opts.metricsRetries && !clean; i++) {
    try {
      const res = await fetch(`${opts.baseUrl}/metrics`);
      const text = await res.text();
      running = metricValue(text, "vllm:num_requests_running");
      kvUsage = metricValue(text, "vllm:kv_cache_usage_perc");
      clean = res.status === 200 && running === 0 && kvUsage === 0;
    } catch (err) {
      running = `unreadable (${err?.message ?? err})`;
    }
    if (!clean) await sleep(500);
  }
  console.log(`metrics: vllm:num_requests_running=${running} vllm:kv_cache_usage_perc=${kvUsage}`);
  if (!clean) {
    failures.push(
      `/metrics did not settle to vllm:num_requests_running 0 and vllm:kv_cache_usage_perc 0 ` +
        `after ${opts.metricsRetries} polls`,
    );
  }

  if (failures.length) {
    console.log("FAIL: " + [...new Set(failures)].slice(0, 10).join("; "));
    process.exit(1);
  }
  console.log("PASS: load_disconnect");
}

main().catch((err) => {
  console.log(`FAIL: ${err?.stack ?? err}`);
  process.exit(1);
});
