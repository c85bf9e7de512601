#!/usr/bin/env python3
"""Client-side checks of gemmaserve's connection rules (issue 27), one per subcommand, driven by
tests/scripts/server_disconnects.sh, server_overload.sh and server_shutdown.sh against a running
tiny server. Every wait is bounded by a deadline and polls; no check sleeps and hopes.
Usage: harden_checks.py CHECK --base-url URL [--model NAME] [...]"""

import argparse
import json
import re
import socket
import sys
import threading
import time
import urllib.error
import urllib.request


class CheckFailed(Exception):
    pass


def expect(cond, message):
    if not cond:
        raise CheckFailed(message)


def host_port(base_url):
    m = re.match(r"http://([^:/]+):(\d+)", base_url)
    return m.group(1), int(m.group(2))


def http(base_url, method, path, body=None, timeout=60):
    """(status, headers, body bytes) of one request on a fresh connection."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base_url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metrics(base_url):
    _, _, body = http(base_url, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def gauge(m, name):
    return sum(v for k, v in m.items() if k.split("{")[0] == name)


def aborted(m):
    return sum(v for k, v in m.items()
               if k.startswith("vllm:request_success_total") and 'finished_reason="abort"' in k)


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def wait_idle(base_url, timeout):
    """Until no request runs or waits and the KV cache holds no block; returns the seconds."""
    start = time.monotonic()

    def idle():
        m = metrics(base_url)
        return (gauge(m, "vllm:num_requests_running") == 0
                and gauge(m, "vllm:num_requests_waiting") == 0
                and gauge(m, "vllm:kv_cache_usage_perc") == 0)
    wait_for("the server to be idle (no running/waiting requests, KV usage 0)", idle, timeout)
    return time.monotonic() - start


def wait_aborted(base_url, before):
    """The engine delivers an abort's final callback (counted there) just after the blocks go."""
    wait_for("the request to be counted aborted", lambda: aborted(metrics(base_url)) > before, 20)


def wait_running(base_url, count, timeout=30):
    wait_for(f"{count} running request(s)",
             lambda: gauge(metrics(base_url), "vllm:num_requests_running") >= count, timeout)


def raw_request(base_url, path, body, extra_headers=""):
    """A connected socket that has sent one POST request (the answer left unread)."""
    host, port = host_port(base_url)
    s = socket.create_connection((host, port))
    payload = json.dumps(body).encode()
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(payload)}\r\n{extra_headers}\r\n").encode() + payload)
    return s


def closed_by_server(s, timeout):
    """True when the server closes the socket within `timeout` (EOF or reset)."""
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(65536)
            if not chunk:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def long_completion(args, stream, max_tokens=1500, **extra):
    body = {"model": args.model, "prompt": "Once upon a time", "max_tokens": max_tokens,
            "ignore_eos": True, "stream": stream}
    body.update(extra)
    return body


def check_error_body(body, status, type_, message_part):
    obj = json.loads(body)
    err = obj.get("error")
    expect(isinstance(err, dict), f"no OpenAI error object in {body[:200]!r}")
    expect(err.get("code") == status and err.get("type") == type_,
           f"error {err} is not {status} {type_}")
    expect(message_part in err.get("message", ""), f"error message {err.get('message')!r} lacks "
           f"{message_part!r}")


# ---- disconnects and slow clients -------------------------------------------------------------

def nonstream_disconnect(args):
    before = aborted(metrics(args.base_url))
    s = raw_request(args.base_url, "/v1/completions", long_completion(args, False))
    wait_running(args.base_url, 1)
    s.close()
    took = wait_idle(args.base_url, 5)
    wait_aborted(args.base_url, before)
    print(f"non-streaming disconnect: idle {took:.3f} s after close")


def stream_disconnect_prefill(args):
    m = metrics(args.base_url)
    before, generated = aborted(m), gauge(m, "vllm:generation_tokens_total")
    # A prompt of 1800 tokens in chunks of --max-num-batched-tokens 64: many prefill steps.
    body = long_completion(args, True, max_tokens=16)
    body["prompt"] = [1000 + (i % 5000) for i in range(1800)]
    s = raw_request(args.base_url, "/v1/completions", body)
    wait_for("the prompt to be in prefill",
             lambda: gauge(metrics(args.base_url), "vllm:kv_cache_usage_perc") > 0, 30)
    s.close()
    expect(gauge(metrics(args.base_url), "vllm:generation_tokens_total") == generated,
           "the first token came before the client left: not mid-prefill")
    took = wait_idle(args.base_url, 5)
    wait_aborted(args.base_url, before)
    print(f"streaming disconnect mid-prefill: idle {took:.3f} s after close")


def stream_disconnect_decode(args):
    before = aborted(metrics(args.base_url))
    s = raw_request(args.base_url, "/v1/chat/completions",
                    {"model": args.model, "messages": [{"role": "user", "content": "hi"}],
                     "max_tokens": 1500, "ignore_eos": True, "stream": True})
    got = b""
    s.settimeout(30)
    while got.count(b"data: ") < 5:
        chunk = s.recv(65536)
        expect(chunk, "stream ended before 5 chunks")
        got += chunk
    s.close()
    took = wait_idle(args.base_url, 5)
    wait_aborted(args.base_url, before)
    print(f"streaming disconnect mid-decode: idle {took:.3f} s after close")


def disconnect_mid_write(args):
    """A large non-streamed answer (n=4, logprobs 20): the client reads 64 KiB of it and leaves
    while the server writes; the server stays healthy and idle."""
    host, port = host_port(args.base_url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((host, port))
    payload = json.dumps(long_completion(args, False, max_tokens=200, n=4, logprobs=20)).encode()
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
               f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload)
    s.settimeout(300)  # the whole answer is generated first (slow under ASan)
    got = b""
    while len(got) < 65536:
        chunk = s.recv(4096)
        expect(chunk, f"answer ended after {len(got)} bytes")
        got += chunk
    expect(got.startswith(b"HTTP/1.1 200"), f"answer {got[:80]!r}")
    length = int(re.search(rb"Content-Length: (\d+)", got).group(1))
    expect(length > 4 * len(got), f"answer of {length} bytes is too small to leave mid-write")
    s.close()
    wait_idle(args.base_url, 5)
    status, _, _ = http(args.base_url, "GET", "/health")
    expect(status == 200, "server unhealthy after a client left mid-write")
    print(f"disconnect mid-write: left after 64 KiB of a {length}-byte answer; healthy and idle")


def slow_reader(args):
    before = aborted(metrics(args.base_url))
    host, port = host_port(args.base_url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.connect((host, port))
    body = long_completion(args, True, max_tokens=1800, n=4, logprobs=20)
    payload = json.dumps(body).encode()
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: "
               f"application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload)
    start = time.monotonic()
    # Never read: the server's buffer fills, its write waits --http-timeout, then it cuts.
    wait_for("the stalled stream's request to be aborted",
             lambda: aborted(metrics(args.base_url)) > before, 60)
    took = wait_idle(args.base_url, 5) + time.monotonic() - start
    expect(closed_by_server(s, 10), "the server did not close the slow reader's connection")
    s.close()
    print(f"slow reader: request aborted and server idle {took:.2f} s after the request")


def slow_sender(args):
    host, port = host_port(args.base_url)
    results = []
    for name, head, trickle in [
            ("headers", b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200),
            ("body", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
             b"application/json\r\nContent-Length: 300\r\n\r\n", b"{" + b" " * 250)]:
        s = socket.create_connection((host, port))
        s.sendall(head)
        start = time.monotonic()
        cut = None
        # One byte every 0.2 s: each read is quick, the whole request is not.
        for b in trickle:
            try:
                s.send(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                cut = time.monotonic() - start
                break
            s.settimeout(0.2)
            try:
                data = s.recv(4096)
                # httplib answers a body it could not read with a 400 before closing.
                expect(not data or data.startswith(b"HTTP/1.1 400 "),
                       f"slow {name}: the server answered {data[:80]!r}")
                cut = time.monotonic() - start
                expect(not data or closed_by_server(s, 5), f"slow {name}: not closed after 400")
                break
            except socket.timeout:
                pass
            except ConnectionResetError:
                cut = time.monotonic() - start
                break
        s.close()
        expect(cut is not None, f"slow {name}: the server never cut the connection")
        # The margin covers a loaded 2-core CI machine (the whole suite runs at -j2 beside it).
        expect(cut < args.http_timeout + 4,
               f"slow {name}: cut after {cut:.1f} s, beyond --http-timeout {args.http_timeout}")
        results.append(f"{name} cut after {cut:.2f} s")
    status, _, _ = http(args.base_url, "GET", "/health")
    expect(status == 200, "server unhealthy after slow senders")
    print("slow sender: " + ", ".join(results))


# ---- overload ---------------------------------------------------------------------------------

def run_in_threads(n, fn):
    out = [None] * n
    def one(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # noqa: BLE001 - reported as the result
            out[i] = e
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    return threads, out


def queue_full_and_deadline(args):
    """--max-num-seqs 1 --max-waiting-requests 2 --request-timeout T: 1 runs, 2 wait, the 4th
    gets 503 + Retry-After; the 3 admitted ones pass their deadline and get 504."""
    body = long_completion(args, False, max_tokens=1800)
    post = lambda i: http(args.base_url, "POST", "/v1/completions", body)  # noqa: E731
    # One at a time: a request counts as waiting until its first step.
    threads, out = run_in_threads(1, post)
    wait_running(args.base_url, 1)
    more_threads, more_out = run_in_threads(2, post)
    threads += more_threads
    wait_for("1 running and 2 waiting", lambda: (
        gauge(metrics(args.base_url), "vllm:num_requests_running") == 1 and
        gauge(metrics(args.base_url), "vllm:num_requests_waiting") == 2), 30)
    status, headers, rbody = http(args.base_url, "POST", "/v1/completions", body)
    expect(status == 503, f"4th request got {status}, not 503")
    expect(headers.get("Retry-After") == "1", f"no Retry-After: 1 in {headers}")
    check_error_body(rbody, 503, "ServiceUnavailableError", "--max-waiting-requests 2")
    start = time.monotonic()
    for t in threads:
        t.join(timeout=60)
    # run_in_threads fills its result lists as threads end: read them after the joins.
    for r in out + more_out:
        expect(not isinstance(r, Exception), f"request failed: {r}")
        status, _, rbody = r
        expect(status == 504, f"deadline: got {status} {rbody[:200]!r}, not 504")
        check_error_body(rbody, 504, "TimeoutError", "--request-timeout")
    wait_idle(args.base_url, 5)
    # A streamed request past its deadline ends with an error event and [DONE].
    s = raw_request(args.base_url, "/v1/completions", long_completion(args, True, max_tokens=1800))
    s.settimeout(60)
    got = b""
    while b"data: [DONE]" not in got:
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    s.close()
    expect(b'"type":"TimeoutError"' in got and b"data: [DONE]" in got,
           f"streamed deadline: no error event then [DONE] in {got[-300:]!r}")
    wait_idle(args.base_url, 5)
    print(f"queue full: 503 + Retry-After; deadline: 3 x 504 within {time.monotonic() - start:.1f}"
          " s, streamed error event")


def thousand_connections(args):
    """1,000 simultaneous requests: each answered 200 or 503 (never a connection error) and the
    waiting queue never seen above --max-waiting-requests."""
    limit = args.max_waiting
    host, port = host_port(args.base_url)
    body = json.dumps({"model": args.model, "prompt": "hi", "max_tokens": 8,
                       "ignore_eos": True}).encode()
    request = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
               f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    socks = []
    for _ in range(args.connections):
        s = socket.create_connection((host, port), timeout=120)
        socks.append(s)
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], gauge(metrics(args.base_url), "vllm:num_requests_waiting"))
    sampler = threading.Thread(target=sample)
    sampler.start()
    for s in socks:
        s.sendall(request)
    statuses = {}
    errors = 0
    for s in socks:
        data = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            errors += 1
        s.close()
        m = re.match(rb"HTTP/1.1 (\d+)", data)
        code = int(m.group(1)) if m else 0
        statuses[code] = statuses.get(code, 0) + 1
    stop.set()
    sampler.join()
    print(f"{args.connections} simultaneous: statuses {statuses}, connection errors {errors}, "
          f"peak waiting {peak[0]:.0f} (limit {limit})")
    expect(errors == 0 and set(statuses) <= {200, 503}, "unexpected statuses or errors")
    expect(peak[0] <= limit, f"waiting queue reached {peak[0]} > --max-waiting-requests {limit}")
    wait_idle(args.base_url, 30)


def connection_cap(args):
    """--max-connections N: N open connections, the next gets 503 + an OpenAI error, then close."""
    host, port = host_port(args.base_url)
    held = [socket.create_connection((host, port)) for _ in range(args.max_connections)]
    # All are open once each is answered (workers open them in any order: a later connection
    # could take a slot first).
    for s in held:
        s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        s.settimeout(10)
        expect(s.recv(4096).startswith(b"HTTP/1.1 200"), "held connection not served")
    def refused():
        s = socket.create_connection((host, port))
        s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        s.settimeout(10)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        return data
    data = wait_for("a refusal", lambda: (lambda d: d if b" 503 " in d[:20] else None)(refused()),
                    10)
    head, _, body = data.partition(b"\r\n\r\n")
    expect(b"Retry-After: 1" in head and b"Connection: close" in head, f"refusal head {head!r}")
    check_error_body(body, 503, "ServiceUnavailableError", "--max-connections")
    for s in held:
        s.close()
    wait_for("a new connection to be served again",
             lambda: http(args.base_url, "GET", "/health")[0] == 200, 10)
    print(f"connection cap {args.max_connections}: next connection refused with 503 + error body")


# ---- shutdown and faults ----------------------------------------------------------------------

def start_inflight(args, count, max_tokens):
    """`count` requests (half streamed) in threads; returns (threads, results)."""
    def one(i):
        stream = i % 2 == 1
        body = long_completion(args, stream, max_tokens=max_tokens)
        status, _, rbody = http(args.base_url, "POST", "/v1/completions", body, timeout=120)
        return stream, status, rbody
    threads, out = run_in_threads(count, one)
    wait_running(args.base_url, count)
    return threads, out


def drain_in_flight(args):
    """Before SIGTERM (sent by the shell): start requests; print READY; they must all finish."""
    threads, out = start_inflight(args, 2, 100)
    print("READY", flush=True)
    # The shell sends SIGTERM now; new requests and /health get 503 meanwhile.
    wait_for("/health to turn 503", lambda: http(args.base_url, "GET", "/health")[0] == 503, 10)
    status, _, rbody = http(args.base_url, "POST", "/v1/completions",
                            long_completion(args, False, max_tokens=4))
    expect(status == 503, f"a request during the drain got {status}")
    check_error_body(rbody, 503, "ServiceUnavailableError", "shutting down")
    for t in threads:
        t.join(timeout=120)
    for r in out:
        expect(not isinstance(r, Exception), f"in-flight request failed: {r}")
        stream, status, rbody = r
        expect(status == 200, f"in-flight request got {status}")
        if stream:
            expect(rbody.rstrip().endswith(b"data: [DONE]") and b'"finish_reason":"length"' in rbody,
                   f"streamed request did not finish: {rbody[-300:]!r}")
        else:
            expect(json.loads(rbody)["choices"][0]["finish_reason"] == "length",
                   "non-streamed request did not finish")
    print("drain: in-flight requests completed (200, finish_reason length); /health and new "
          "requests 503 meanwhile")


def abort_at_timeout(args):
    """Requests longer than --shutdown-timeout allows: aborted with 503 (or an error event)."""
    threads, out = start_inflight(args, 4, 1800)
    print("READY", flush=True)
    for t in threads:
        t.join(timeout=60)
    for r in out:
        expect(not isinstance(r, Exception), f"request failed at the transport: {r}")
        stream, status, rbody = r
        if stream:
            expect(status == 200 and b"shutting down" in rbody, f"stream: {rbody[-300:]!r}")
        else:
            expect(status == 503, f"non-streamed got {status}")
            check_error_body(rbody, 503, "ServiceUnavailableError", "shutting down")
    print("shutdown timeout: 4 long requests aborted with 503 / an error event")


def preempted_abort(args):
    """With a KV cache too small for all, requests get preempted; a preempted one whose client
    leaves is aborted and the cache empties."""
    socks = [raw_request(args.base_url, "/v1/completions", long_completion(args, False, 650))
             for _ in range(args.requests)]
    wait_for("a preemption", lambda: gauge(metrics(args.base_url),
                                             "vllm:num_preemptions_total") > 0, 60)
    for s in socks:
        s.close()
    took = wait_idle(args.base_url, 5)
    print(f"abort while preempted: idle {took:.3f} s after the clients left")


def failed_engine(args):
    """GEMMASERVE_FAULT_ENGINE_STEP makes the engine thread fail: the request gets a 500 and
    /health turns 503 with the engine's error until the server exits (server_shutdown.sh checks
    that exit)."""
    status, _, rbody = http(args.base_url, "POST", "/v1/completions",
                            long_completion(args, False, max_tokens=16))
    expect(status == 500, f"a request on a failing engine got {status}, not 500")
    check_error_body(rbody, 500, "InternalServerError", "injected engine fault")
    try:
        status, _, rbody = http(args.base_url, "GET", "/health")
    except (ConnectionError, urllib.error.URLError):
        print("failed engine: the server had already exited at /health")
        return
    expect(status == 503, f"/health got {status} after the engine failed")
    check_error_body(rbody, 503, "ServiceUnavailableError",
                     "The engine stopped after an error: injected engine fault")
    print("failed engine: /health 503 with the engine's error")


CHECKS = {f.__name__: f for f in [
    nonstream_disconnect, stream_disconnect_prefill, stream_disconnect_decode,
    disconnect_mid_write, slow_reader,
    slow_sender, queue_full_and_deadline, thousand_connections, connection_cap, drain_in_flight,
    abort_at_timeout, preempted_abort, failed_engine]}


def run_check(checks, add_arguments=None):
    """Runs the check named on the command line (with --base-url and the options shared by these
    checks, plus those `add_arguments` adds): 0, or 1 after printing its failure."""
    p = argparse.ArgumentParser()
    p.add_argument("check", choices=sorted(checks))
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", default="tiny")
    p.add_argument("--max-connections", type=int, default=8)
    p.add_argument("--connections", type=int, default=1000)
    if add_arguments:
        add_arguments(p)
    args = p.parse_args()
    try:
        checks[args.check](args)
    except CheckFailed as e:
        print(f"FAIL: {args.check}: {e}")
        return 1
    return 0


def main():
    def more(p):
        p.add_argument("--http-timeout", type=float, default=2)
        p.add_argument("--max-waiting", type=int, default=16)
        p.add_argument("--requests", type=int, default=6)
    return run_check(CHECKS, more)


if __name__ == "__main__":
    sys.exit(main())
