#!/usr/bin/env python3
"""Client-side checks of gemmaserve's bounds on what a client can make it hold, driven by
tests/scripts/server_bounds.sh against a running tiny server: requests in progress when SIGTERM
comes are drained (not only those already generating), a request's size is bounded however it is
sent (chunked, huge header line, no length), and a flood of connections past --max-connections
does not queue descriptors. Every wait is bounded by a deadline and polls.
Usage: bounds_checks.py CHECK --base-url URL --server-pid PID [...]"""

import json
import os
import socket
import sys
import threading
import time

from harden_checks import (CheckFailed, check_error_body, expect, host_port, http, run_check,
                           wait_for)


def read_response(s, timeout, past_end=None):
    """(status, headers dict with lower-case names, body bytes) of one response on `s`, read to
    its Content-Length, or None when the server closed or reset the connection first. The bytes
    received past the response are appended to the list `past_end` when given."""
    s.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                return None
            body += chunk
        if past_end is not None:
            past_end.append(body[length:])
        return int(lines[0].split()[1]), headers, body[:length]
    except (ConnectionResetError, BrokenPipeError):
        return None


def closed_after(s, timeout):
    """True when the server closes `s` (EOF or reset) within `timeout`, sending nothing more."""
    s.settimeout(timeout)
    try:
        return s.recv(65536) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def proc_status(pid, field):
    """A kB field (VmRSS, VmHWM) of /proc/PID/status, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise CheckFailed(f"no {field} in /proc/{pid}/status")


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


# ---- shutdown: requests in progress before admission ------------------------------------------

def drain_before_admission(args):
    """Two requests whose bodies are not sent yet (a completion, and /tokenize which never reaches
    the engine) when SIGTERM comes (sent by the shell after READY): both get their whole answer,
    with Connection: close, and the server then closes the connections."""
    host, port = host_port(args.base_url)
    requests = [
        ("/v1/completions", {"model": args.model, "prompt": "Once upon a time", "max_tokens": 8,
                             "ignore_eos": True}),
        ("/tokenize", {"model": args.model, "prompt": "Once upon a time"}),
    ]
    pending = []
    for path, body in requests:
        payload = json.dumps(body).encode()
        s = socket.create_connection((host, port))
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(payload)}\r\nExpect: 100-continue\r\n\r\n").encode())
        # The server's 100 Continue: it has begun the request (read its headers).
        s.settimeout(30)
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            expect(chunk, f"{path}: closed before 100 Continue")
            got += chunk
        expect(got == b"HTTP/1.1 100 Continue\r\n\r\n", f"{path}: {got!r}, not 100 Continue")
        pending.append((path, s, payload))
    print("READY", flush=True)
    wait_for("/health to turn 503", lambda: http(args.base_url, "GET", "/health")[0] == 503, 10)
    for path, s, payload in pending:
        s.sendall(payload)
        got = read_response(s, 60)
        expect(got is not None, f"{path}: the connection was closed before an answer")
        status, headers, body = got
        expect(status == 200, f"{path}: got {status} {body[:200]!r} during the drain")
        expect(headers.get("connection") == "close",
               f"{path}: no Connection: close during the drain: {headers}")
        if path == "/v1/completions":
            expect(json.loads(body)["choices"][0]["finish_reason"] == "length",
                   f"{path}: not finished: {body[:200]!r}")
        else:
            expect(json.loads(body)["count"] > 0, f"{path}: {body[:200]!r}")
        expect(closed_after(s, 10), f"{path}: connection kept open after Connection: close")
        s.close()
    print("drain: a completion and a /tokenize begun before SIGTERM got 200 + Connection: close")


# ---- request size -----------------------------------------------------------------------------

def send_and_answer(args, head, body_chunks):
    """Sends `head` then the chunks (in a thread, stopping at the first send error) and reads
    the answer: (answer or None when closed, seconds, MiB the sender got out)."""
    host, port = host_port(args.base_url)
    s = socket.create_connection((host, port))
    sent = [0]

    def sender():
        try:
            s.sendall(head)
            for chunk in body_chunks:
                s.sendall(chunk)
                sent[0] += len(chunk)
        except OSError:
            pass
    start = time.monotonic()
    t = threading.Thread(target=sender)
    t.start()
    got = read_response(s, 60)
    took = time.monotonic() - start
    s.close()  # ends the sender's sendall with an error if it still runs
    t.join(timeout=60)
    return got, took, sent[0] / (1 << 20)


def oversized_requests(args):
    """--max-request-size-mb 1: a chunked 200 MB body, a 200 MB header line and a 200 MB body
    without a length (an empty body, as RFC 9112 reads it; the rest is a request line too long)
    to /tokenize and /v1/completions get 413 / 431 / 400 quickly, or a closed connection, and
    the server's peak RSS stays within 32 MiB of what it was."""
    pid = args.server_pid
    hwm_before = proc_status(pid, "VmHWM")
    block = b"x" * (1 << 20)
    mib = 200
    results = []
    for path in ["/tokenize", "/v1/completions"]:
        start = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        cases = [
            ("chunked body", (start + "Transfer-Encoding: chunked\r\n\r\n").encode(),
             (b"100000\r\n" + block + b"\r\n" for _ in range(mib)), 413,
             "Request Entity Too Large", "Request body too large (see --max-request-size-mb)"),
            ("header line", (start + "X-Big: ").encode(), (block for _ in range(mib)), 431,
             "Request Header Fields Too Large", "Request line and headers too large (more than 64 KiB)"),
            ("body without length", (start + "\r\n").encode(), (block for _ in range(mib)), 400,
             "BadRequestError", "JSON decode error: [json.exception.parse_error.101]"),
        ]
        for name, head, chunks, want_status, want_type, want_message in cases:
            got, took, sent = send_and_answer(args, head, chunks)
            expect(took < 20, f"{path} {name}: answered after {took:.1f} s")
            if got is None:
                results.append(f"{path} {name}: closed after {took:.2f} s, {sent:.0f} MiB sent")
                continue
            status, _, body = got
            expect(status == want_status, f"{path} {name}: got {status} {body[:200]!r}, not "
                   f"{want_status}")
            check_error_body(body, want_status, want_type, want_message)
            results.append(f"{path} {name}: {status} after {took:.2f} s, {sent:.0f} MiB sent")
    # A chunked body within the limit is read as any other.
    payload = json.dumps({"model": args.model, "prompt": "Once upon a time"}).encode()
    got, _, _ = send_and_answer(args, b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                b"application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                                [b"%x\r\n" % len(payload) + payload + b"\r\n0\r\n\r\n"])
    expect(got is not None and got[0] == 200 and json.loads(got[2])["count"] > 0,
           f"a small chunked /tokenize got {got}")
    hwm_after = proc_status(pid, "VmHWM")
    growth = (hwm_after - hwm_before) / (1 << 20)
    print("\n".join(results))
    print(f"peak RSS {hwm_before / (1 << 20):.0f} MiB -> {hwm_after / (1 << 20):.0f} MiB")
    expect(growth < 32, f"the server's peak RSS grew {growth:.0f} MiB on oversized requests")
    status, _, _ = http(args.base_url, "GET", "/health")
    expect(status == 200, "server unhealthy after oversized requests")


# ---- connection flood -------------------------------------------------------------------------

def connection_flood(args):
    """--max-connections 8, all 8 held: 1,500 more connections that send nothing each get a 503
    or are closed within seconds, and the server never holds more than its bound of descriptors
    (the cap, the workers for refusals, the bounded backlog and its own files)."""
    host, port = host_port(args.base_url)
    pid = args.server_pid
    held = [socket.create_connection((host, port)) for _ in range(args.max_connections)]
    for s in held:  # each answered: all hold their slot
        s.sendall(f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        got = read_response(s, 10)
        expect(got is not None and got[0] == 200, "held connection not served")
    base = open_fds(pid)
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], open_fds(pid))
            except FileNotFoundError:
                pass
    sampler = threading.Thread(target=sample)
    sampler.start()
    flood = []
    try:
        for _ in range(args.connections):
            flood.append(socket.create_connection((host, port), timeout=30))
        statuses = {}
        for s in flood:
            got = read_response(s, 30)
            key = "closed" if got is None else got[0]
            statuses[key] = statuses.get(key, 0) + 1
    finally:
        stop.set()
        sampler.join()
        for s in flood + held:
            s.close()
    # Threads for the cap plus refusals (--max-http-workers 72 = cap + 64), twice, and slack.
    bound = base + 2 * (max(args.max_connections, 8) + 64) + 32
    print(f"{args.connections} connections over the cap: {statuses}; server descriptors "
          f"{base} -> peak {peak[0]} (bound {bound})")
    expect(set(statuses) <= {503, "closed"}, f"unexpected answers {statuses}")
    expect(peak[0] <= bound, f"the server held {peak[0]} descriptors (bound {bound})")
    wait_for("a new connection to be served again",
             lambda: http(args.base_url, "GET", "/health")[0] == 200, 10)


CHECKS = {f.__name__: f for f in [drain_before_admission, oversized_requests, connection_flood]}


def main():
    return run_check(CHECKS, lambda p: p.add_argument("--server-pid", type=int, default=0))


if __name__ == "__main__":
    sys.exit(main())
