#!/usr/bin/env python3
"""The soak's load (scripts/bench/soak.sh): CLIENTS concurrent loopback clients for DURATION seconds
against a gemmaserve server, each looping over a seeded mix of completions and chat (streamed and
not), dropped streams, abandoned non-streamed requests, malformed and oversized bodies, over-long
prompts, unknown models and GET routes. Every answer is checked: generation 200 with a complete
body, each bad input its exact 4xx and OpenAI error object. RSS (of SERVER_PID) and /metrics are
sampled every second into a CSV. At the end the server must be idle (no running or waiting
request, KV usage 0) and still answer; RSS at the end is compared with RSS after a warm-up that
reached full concurrency. Prints a JSON summary; exit 1 when a check failed."""

import argparse
import asyncio
import json
import random
import re
import sys
import time

GEN_PATHS = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}


def metric_values(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{")[0]
        out[base] = out.get(base, 0.0) + float(value)
    return out


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def exchange(host, port, raw, read=True, timeout=120):
    """Sends raw request bytes on a new connection; returns (status, headers, body)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    try:
        writer.write(raw)
        await writer.drain()
        if not read:
            return None
        data = await asyncio.wait_for(reader.read(-1), timeout)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.1 (\d+)", head)
    status = int(m.group(1)) if m else 0
    if b"Transfer-Encoding: chunked" in head:
        body = dechunk(body)
    return status, head, body


def dechunk(body):
    out, i = b"", 0
    while i < len(body):
        j = body.index(b"\r\n", i)
        size = int(body[i:j], 16)
        if size == 0:
            break
        out += body[j + 2:j + 2 + size]
        i = j + 2 + size + 2
    return out


def request_bytes(host, method, path, body=b"", content_type="application/json"):
    head = f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n"
    if method == "POST":
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"\r\n" + body


class Soak:
    def __init__(self, args):
        self.a = args
        self.host, self.port = args.host, args.port
        self.counts = {}
        self.unexpected = []
        self.connection_errors = 0
        self.clients_started = set()
        self.full_concurrency_at = None
        self.stop_at = None

    def count(self, kind):
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def bad(self, kind, what):
        if len(self.unexpected) < 50:
            self.unexpected.append(f"{kind}: {what}")
        self.count("unexpected")

    def gen_body(self, rng, kind, stream):
        body = {"model": self.a.model, "max_tokens": rng.randint(1, self.a.max_tokens),
                "stream": stream}
        if kind == "chat":
            body["messages"] = [{"role": "user", "content": f"Tell me about {rng.random():.6f}"}]
        else:
            body["prompt"] = f"Once upon a time {rng.random():.6f}"
        return body

    def check_error(self, kind, status, body, want_status, want_type, want_message):
        if status != want_status:
            return self.bad(kind, f"status {status}, wanted {want_status}: {body[:160]!r}")
        try:
            err = json.loads(body)["error"]
        except (ValueError, KeyError, TypeError):
            return self.bad(kind, f"no OpenAI error object: {body[:160]!r}")
        if err.get("code") != want_status or err.get("type") != want_type or \
                want_message not in err.get("message", ""):
            return self.bad(kind, f"error {err}")

    async def one(self, rng, client):
        kinds = ["completion", "completion_stream", "chat", "chat_stream", "dropped_stream",
                 "abandoned", "malformed", "oversized", "too_long", "unknown_model", "get"]
        weights = [20, 20, 20, 20, 6, 6, 2, 1, 2, 2, 6]
        kind = rng.choices(kinds, weights)[0]
        self.count(kind)
        host = self.host
        if kind in ("completion", "chat", "completion_stream", "chat_stream"):
            stream = kind.endswith("_stream")
            route = kind.replace("_stream", "")
            body = json.dumps(self.gen_body(rng, route, stream)).encode()
            status, _, rbody = await exchange(host, self.port,
                                              request_bytes(host, "POST", GEN_PATHS[route], body))
            if status != 200:
                return self.bad(kind, f"status {status}: {rbody[:160]!r}")
            if stream:
                events = [e[len(b"data: "):] for e in rbody.split(b"\n\n") if e]
                if not events or events[-1] != b"[DONE]":
                    return self.bad(kind, f"stream did not finish: {rbody[-160:]!r}")
                # An error event is an object with a top-level "error" (text may say "error").
                if any("error" in json.loads(e) for e in events[:-1]):
                    return self.bad(kind, f"error event: {rbody[-160:]!r}")
            else:
                obj = json.loads(rbody)
                if not obj.get("choices") or obj["choices"][0].get("finish_reason") is None:
                    return self.bad(kind, f"no finished choice: {rbody[:160]!r}")
        elif kind == "dropped_stream":
            body = self.gen_body(rng, rng.choice(["completion", "chat"]), True)
            body["max_tokens"] = self.a.max_tokens
            route = "chat" if "messages" in body else "completion"
            reader, writer = await asyncio.open_connection(host, self.port)
            writer.write(request_bytes(host, "POST", GEN_PATHS[route], json.dumps(body).encode()))
            await writer.drain()
            got = b""
            while got.count(b"data: ") < rng.randint(1, 3):
                chunk = await asyncio.wait_for(reader.read(4096), 60)
                if not chunk:
                    break
                got += chunk
            writer.close()
            if not got.startswith(b"HTTP/1.1 200"):
                return self.bad(kind, f"{got[:120]!r}")
        elif kind == "abandoned":
            body = json.dumps(self.gen_body(rng, "completion", False) | {
                "max_tokens": self.a.max_tokens}).encode()
            reader, writer = await asyncio.open_connection(host, self.port)
            writer.write(request_bytes(host, "POST", "/v1/completions", body))
            await writer.drain()
            await asyncio.sleep(rng.uniform(0, 0.2))
            writer.close()
        elif kind == "malformed":
            status, _, rbody = await exchange(host, self.port, request_bytes(
                host, "POST", GEN_PATHS[rng.choice(["completion", "chat"])], b'{"model": "x",'))
            self.check_error(kind, status, rbody, 400, "BadRequestError", "JSON decode error")
        elif kind == "oversized":
            big = b'{"prompt": "' + b"a" * (self.a.max_request_bytes + 1024) + b'"}'
            status, _, rbody = await exchange(host, self.port,
                                              request_bytes(host, "POST", "/v1/completions", big))
            self.check_error(kind, status, rbody, 413, "Request Entity Too Large",
                             "Request body too large")
        elif kind == "too_long":
            body = {"model": self.a.model, "prompt": [1000 + i for i in range(self.a.max_model_len
                                                                              + 10)],
                    "max_tokens": 4}
            status, _, rbody = await exchange(host, self.port, request_bytes(
                host, "POST", "/v1/completions", json.dumps(body).encode()))
            self.check_error(kind, status, rbody, 400, "BadRequestError",
                             f"the model's context length is only {self.a.max_model_len} tokens")
        elif kind == "unknown_model":
            body = self.gen_body(rng, "chat", False) | {"model": "no-such-model"}
            status, _, rbody = await exchange(host, self.port, request_bytes(
                host, "POST", "/v1/chat/completions", json.dumps(body).encode()))
            self.check_error(kind, status, rbody, 404, "NotFoundError",
                             "The model `no-such-model` does not exist.")
        else:
            path = rng.choice(["/health", "/v1/models", "/metrics", "/version", "/tokenizer_info",
                               "/ping"])
            status, _, rbody = await exchange(host, self.port, request_bytes(host, "GET", path))
            if status != 200:
                return self.bad(kind, f"GET {path}: {status}")

    async def client(self, index):
        rng = random.Random(self.a.seed * 100003 + index)
        await asyncio.sleep(rng.uniform(0, 1))  # a ramp, not one SYN burst
        while time.monotonic() < self.stop_at:
            try:
                await self.one(rng, index)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
                self.connection_errors += 1
                if len(self.unexpected) < 50:
                    self.unexpected.append(f"connection error: {e!r}")
            except Exception as e:  # noqa: BLE001 - a body that does not parse, say
                self.bad("exception", repr(e))
            self.clients_started.add(index)
            if self.full_concurrency_at is None and len(self.clients_started) == self.a.clients:
                self.full_concurrency_at = time.monotonic()

    async def metrics(self):
        status, _, body = await exchange(self.host, self.port,
                                         request_bytes(self.host, "GET", "/metrics"))
        return metric_values(body.decode()) if status == 200 else {}

    async def sampler(self, csv, t0, samples):
        csv.write("seconds,rss_kb,running,waiting,kv_cache_usage,requests_done,unexpected,"
                  "connection_errors\n")
        while True:
            m = await self.metrics()
            row = (round(time.monotonic() - t0, 2), rss_kb(self.a.server_pid),
                   m.get("vllm:num_requests_running", 0), m.get("vllm:num_requests_waiting", 0),
                   m.get("vllm:kv_cache_usage_perc", 0), sum(self.counts.values()),
                   self.counts.get("unexpected", 0), self.connection_errors)
            samples.append(row)
            csv.write(",".join(str(x) for x in row) + "\n")
            csv.flush()
            await asyncio.sleep(1)

    async def run(self):
        t0 = time.monotonic()
        self.stop_at = t0 + self.a.duration
        samples = []
        with open(self.a.csv, "w") as csv:
            sampler = asyncio.create_task(self.sampler(csv, t0, samples))
            clients = [asyncio.create_task(self.client(i)) for i in range(self.a.clients)]
            # RSS after warm-up: full concurrency reached, then warmup seconds more.
            while self.full_concurrency_at is None and time.monotonic() < self.stop_at:
                await asyncio.sleep(0.2)
            warm_at = (self.full_concurrency_at or self.stop_at) + self.a.warmup
            while time.monotonic() < min(warm_at, self.stop_at):
                await asyncio.sleep(0.2)
            rss_warm = rss_kb(self.a.server_pid)
            warm_seconds = time.monotonic() - t0
            await asyncio.gather(*clients)
            # Idle: no running or waiting request and an empty KV cache, within a bound.
            idle_deadline = time.monotonic() + 30
            idle = False
            while time.monotonic() < idle_deadline:
                m = await self.metrics()
                if (m.get("vllm:num_requests_running", 1) == 0 and
                        m.get("vllm:num_requests_waiting", 1) == 0 and
                        m.get("vllm:kv_cache_usage_perc", 1) == 0):
                    idle = True
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(2)  # the last samples, at rest
            sampler.cancel()
        rss_end = rss_kb(self.a.server_pid)
        body = json.dumps({"model": self.a.model, "prompt": "still there?", "max_tokens": 4})
        status, _, _ = await exchange(self.host, self.port, request_bytes(
            self.host, "POST", "/v1/completions", body.encode()))
        growth = (rss_end - rss_warm) / rss_warm if rss_warm else 0
        summary = {
            "clients": self.a.clients, "duration_s": self.a.duration,
            "requests": sum(v for k, v in self.counts.items() if k != "unexpected"),
            "by_kind": {k: v for k, v in sorted(self.counts.items()) if k != "unexpected"},
            "unexpected_statuses": self.counts.get("unexpected", 0),
            "connection_errors": self.connection_errors,
            "full_concurrency_after_s": round((self.full_concurrency_at or t0) - t0, 2),
            "rss_after_warmup_kb": rss_warm, "warmup_end_s": round(warm_seconds, 1),
            "rss_end_kb": rss_end, "rss_growth_pct": round(100 * growth, 2),
            "rss_peak_kb": max((s[1] for s in samples), default=0),
            "idle_at_end": idle, "answers_after": status,
            "examples": self.unexpected[:10],
        }
        # RSS is judged only after a warm-up at full concurrency (a loose tolerance: not judged).
        rss_ok = abs(growth) <= self.a.rss_tolerance and (
            self.full_concurrency_at is not None or self.a.rss_tolerance >= 1)
        ok = (summary["unexpected_statuses"] == 0 and self.connection_errors == 0 and idle and
              status == 200 and rss_ok)
        summary["pass"] = ok
        print(json.dumps(summary, indent=1))
        return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--warmup", type=float, default=30, help="seconds after full concurrency")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--max-request-bytes", type=int, default=1 << 20)
    p.add_argument("--rss-tolerance", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--csv", required=True)
    args = p.parse_args()
    return 0 if asyncio.run(Soak(args).run()) else 1


if __name__ == "__main__":
    sys.exit(main())
