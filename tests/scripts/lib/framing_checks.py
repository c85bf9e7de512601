#!/usr/bin/env python3
"""Client-side checks of HTTP framing after an early answer (issue 35, point 3) and of the HTTP
worker bound (--max-http-workers), driven by tests/scripts/server_framing.sh against a running
tiny server. Each early-answer check sends a request the server answers before (or without)
reading its whole body, whose body is itself a valid HTTP request, then a second request on the
SAME connection: the second must get its own answer, or the first answer must say
Connection: close and the server close the connection with nothing more sent (the smuggled
request never runs). Every wait is bounded by a deadline and polls.
Usage: framing_checks.py CHECK --base-url URL [--api-key KEY] [--server-pid PID] [...]"""

import json
import os
import signal
import socket
import threading
import time

from bounds_checks import read_response
from harden_checks import (CheckFailed, check_error_body, expect, host_port, http, long_completion,
                           metrics, gauge, run_check, wait_for, wait_running)

# The body of every early-answered request: a complete request of its own. Run as one, it would
# answer /version, which no second request here asks for.
SMUGGLED = b"GET /version HTTP/1.1\r\nHost: smuggled\r\n\r\n"


def head(method, path, host, headers=(), length=None):
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"] + list(headers)
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def models_request(args, host):
    """The second request: GET /v1/models with the right key (200, a list naming the model)."""
    auth = [f"Authorization: Bearer {args.api_key}"] if args.api_key else []
    return head("GET", "/v1/models", host, auth)


def is_models_answer(args, got):
    if got is None or got[0] != 200:
        return False
    try:
        return json.loads(got[2])["data"][0]["id"] == args.model
    except (ValueError, KeyError, IndexError):
        return False


class Connection:
    """A client socket that keeps what it received past one answer: the answer to a request the
    server parsed out of a body arrives right behind the first answer, often in the same read."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port))
        self.pending = b""

    def recv(self, size):
        if self.pending:
            out, self.pending = self.pending, b""
            return out
        return self.sock.recv(size)

    def settimeout(self, timeout):
        self.sock.settimeout(timeout)

    def answer(self, timeout=30):
        """(status, headers, body) of the next answer, or None when the server closed first."""
        past_end = []
        try:
            got = read_response(self, timeout, past_end)
        except socket.timeout:
            return None
        self.pending = b"".join(past_end)
        return got

    def closed_with_nothing_more(self, timeout):
        """True when the server closes (EOF or reset) within `timeout` having sent nothing more."""
        if self.pending:
            return False
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(65536) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def send_all(s, data):
    """Sends `data` in a thread (the server may answer and close before taking all of it)."""
    def sender():
        try:
            s.sendall(data)
        except OSError:
            pass
    t = threading.Thread(target=sender, daemon=True)
    t.start()
    return t


def reuse_after(args, name, first, want_status, may_keep_alive=True, check_first=None,
                after_continue=None):
    """Sends `first` on a new connection (then `after_continue` once the server answered
    100 Continue) and reads its answer (`want_status`); then either the answer kept the
    connection and a second request on it gets its own answer, or the answer said
    Connection: close and the server closes with nothing more. Returns 'kept' or 'closed'."""
    host, port = host_port(args.base_url)
    conn = Connection(host, port)
    s = conn.sock
    try:
        sender = send_all(s, first)
        if after_continue is not None:
            interim = conn.answer()
            expect(interim is not None and interim[0] == 100, f"{name}: got {interim}, not 100")
            s.sendall(after_continue)
        got = conn.answer()
        expect(got is not None, f"{name}: no answer, the connection was closed")
        status, headers, body = got
        expect(status == want_status, f"{name}: got {status} {body[:200]!r}, not {want_status}")
        if check_first:
            check_first(body)
        sender.join(timeout=30)
        if headers.get("connection", "").lower() == "close":
            expect(conn.closed_with_nothing_more(10),
                   f"{name}: Connection: close, but the server sent more or kept the connection")
            return "closed"
        expect(may_keep_alive, f"{name}: answer kept the connection (headers {headers})")
        s.sendall(models_request(args, host))
        second = conn.answer()
        expect(second is not None, f"{name}: the connection kept alive was closed unanswered")
        expect(is_models_answer(args, second),
               f"{name}: the second request on the connection got {second[0]} "
               f"{second[2][:200]!r}, not its /v1/models answer (the first request's body was "
               "parsed as a request)")
        return "kept"
    finally:
        s.close()


def early_answers(args):
    """Every path that answers before reading the whole body, each followed on its connection by
    a second request (server started with --api-key, --max-request-size-mb 1)."""
    host, _ = host_port(args.base_url)
    json_type = "Content-Type: application/json"
    wrong_key = "Authorization: Bearer wrong-key"
    key = f"Authorization: Bearer {args.api_key}"
    big = SMUGGLED + b" " * (300 << 10)  # past the 256 KiB the server reads and drops
    chunked_smuggled = b"%x\r\n" % len(SMUGGLED) + SMUGGLED + b"\r\n0\r\n\r\n"

    def unauthorized(body):
        expect(json.loads(body) == {"error": "Unauthorized"}, f"401 body {body[:200]!r}")

    cases = [
        # (name, request, status, may keep the connection, check of the first answer[, the body
        # sent after 100 Continue])
        ("auth 401, wrong key, smuggled body",
         head("POST", "/v1/completions", host, [json_type, wrong_key], len(SMUGGLED)) + SMUGGLED,
         401, True, unauthorized),
        ("auth 401, no key, smuggled body",
         head("POST", "/v1/chat/completions", host, [json_type], len(SMUGGLED)) + SMUGGLED,
         401, True, unauthorized),
        ("auth 401, 300 KiB body",
         head("POST", "/v1/completions", host, [json_type, wrong_key], len(big)) + big,
         401, False, unauthorized),
        ("auth 401, chunked smuggled body",
         head("POST", "/v1/completions", host,
              [json_type, wrong_key, "Transfer-Encoding: chunked"]) + chunked_smuggled,
         401, False, unauthorized),
        ("auth 401 after 100-continue",
         head("POST", "/v1/completions", host,
              [json_type, wrong_key, "Expect: 100-continue"], len(SMUGGLED)),
         401, True, unauthorized, SMUGGLED),
        ("404, GET with a body",
         head("GET", "/nowhere", host, [], len(SMUGGLED)) + SMUGGLED, 404, True, None),
        ("404, POST",
         head("POST", "/nowhere", host, [json_type], len(SMUGGLED)) + SMUGGLED, 404, True, None),
        ("405, GET with a body",
         head("GET", "/v1/completions", host, [key], len(SMUGGLED)) + SMUGGLED, 405, True, None),
        ("405, PUT",
         head("PUT", "/v1/models", host, [key], len(SMUGGLED)) + SMUGGLED, 405, True, None),
        ("200, GET /health with a body",
         head("GET", "/health", host, [], len(SMUGGLED)) + SMUGGLED, 200, True, None),
        ("400, unknown method with a body (httplib refuses it with the request line)",
         head("BREW", "/v1/models", host, [key], len(SMUGGLED)) + SMUGGLED, 400, True, None),
        ("413, Content-Length over --max-request-size-mb",
         head("POST", "/tokenize", host, [json_type], 2 << 20) + SMUGGLED, 413, False, None),
        ("414, request line over 8 KiB",
         head("POST", "/tokenize?" + "a" * 9000, host, [json_type], len(SMUGGLED)) + SMUGGLED,
         414, False, None),
        ("431, headers over 64 KiB",
         head("POST", "/tokenize", host, [json_type, "X-Pad: " + "a" * (70 << 10)],
              len(SMUGGLED)) + SMUGGLED, 431, False, None),
        ("400, Content-Length in hex (httplib read it as 0)",
         head("POST", "/tokenize", host, [json_type, f"Content-Length: {len(SMUGGLED):#x}"])
         + SMUGGLED,
         400, False, None),
        ("400, two different Content-Lengths",
         head("POST", "/tokenize", host, [json_type, f"Content-Length: {len(SMUGGLED)}"], 0)
         + SMUGGLED, 400, False, None),
        ("400, Content-Length and chunked together",
         head("POST", "/tokenize", host, [json_type, "Transfer-Encoding: chunked"], 5)
         + b"0\r\n\r\n" + SMUGGLED, 400, False, None),
        ("400, Transfer-Encoding not chunked",
         head("POST", "/tokenize", host, [json_type, "Transfer-Encoding: gzip, chunked"])
         + chunked_smuggled, 400, False, None),
        ("400, chunk data not followed by CRLF (httplib ended the body there)",
         head("POST", "/tokenize", host, [json_type, "Transfer-Encoding: chunked"])
         + b"2\r\n{}XX\r\n" + SMUGGLED, 400, False, None),
    ]
    outcomes = []
    for name, *case in cases:
        outcomes.append(f"{name}: {reuse_after(args, name, *case)}")
    # Requests whose body was read keep their connection, chunked ones too.
    prompt = b'{"prompt": "hello"}'
    for name, request in [
            ("200 /tokenize", head("POST", "/tokenize", host, [json_type], len(prompt)) + prompt),
            ("200 /tokenize, chunked",
             head("POST", "/tokenize", host, [json_type, "Transfer-Encoding: chunked"])
             + b"%x\r\n" % len(prompt) + prompt + b"\r\n0\r\n\r\n")]:
        expect(reuse_after(args, name, request, 200) == "kept", f"{name}: connection closed")
    print("early answers, each followed by a request on its connection:\n  " +
          "\n  ".join(outcomes))


# ---- overload and drain -----------------------------------------------------------------------

def held_completions(args, count):
    """`count` long completions on raw sockets (the answers left unread); close them to abort."""
    host, port = host_port(args.base_url)
    body = json.dumps(long_completion(args, False, max_tokens=1800)).encode()
    auth = [f"Authorization: Bearer {args.api_key}"] if args.api_key else []
    socks = []
    for _ in range(count):
        s = socket.create_connection((host, port))
        s.sendall(head("POST", "/v1/completions", host,
                       ["Content-Type: application/json"] + auth, len(body)) + body)
        socks.append(s)
    return socks


def completion_request(args, host):
    body = json.dumps({"model": args.model, "prompt": "hi", "max_tokens": 4}).encode()
    auth = [f"Authorization: Bearer {args.api_key}"] if args.api_key else []
    return head("POST", "/v1/completions", host, ["Content-Type: application/json"] + auth,
                len(body)) + body


def overload_then_drain(args):
    """--max-num-seqs 1 --max-waiting-requests 1 --shutdown-timeout 30: with one request running
    and one waiting, a completion gets the overload 503 (its body read) and its connection
    serves the next request; after SIGTERM (sent here), one gets the drain 503 with
    Connection: close and the connection is closed."""
    host, _ = host_port(args.base_url)
    held = held_completions(args, 1)
    wait_running(args.base_url, 1)
    held += held_completions(args, 1)
    wait_for("1 waiting", lambda: gauge(metrics(args.base_url), "vllm:num_requests_waiting") == 1,
             30)

    def overloaded(body):
        check_error_body(body, 503, "ServiceUnavailableError", "--max-waiting-requests 1")
    outcome = reuse_after(args, "overload 503", completion_request(args, host), 503, True,
                          overloaded)
    expect(outcome == "kept", "overload 503 closed its connection (its body was read)")
    os.kill(args.server_pid, signal.SIGTERM)
    wait_for("/health to turn 503", lambda: http(args.base_url, "GET", "/health")[0] == 503, 10)
    outcome = reuse_after(args, "drain 503", completion_request(args, host), 503, False)
    for s in held:
        s.close()  # aborts them: the drain ends
    print(f"overload 503: kept (next request answered); drain 503: {outcome}")


# ---- worker bound -----------------------------------------------------------------------------

def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise CheckFailed(f"no Threads in /proc/{pid}/status")


def worker_bound(args):
    """--max-http-workers W: W connections held open (each holds a worker), then a burst of
    --connections more, each sending a request: every one gets the 503 naming the flag, with
    Connection: close, within the deadline; the server's threads never pass those it had idle
    + W; once the held connections close, a new one is served."""
    host, port = host_port(args.base_url)
    workers = args.max_http_workers
    pid = args.server_pid
    idle_threads = threads_of(pid)
    peak = [idle_threads]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], threads_of(pid))
    sampler = threading.Thread(target=sample)
    sampler.start()
    held, burst, statuses = [], [], {}
    try:
        for _ in range(workers):
            s = socket.create_connection((host, port))
            s.sendall(head("GET", "/health", host))
            got = read_response(s, 10)
            expect(got is not None and got[0] == 200, "a held connection was not served")
            held.append(s)
        start = time.monotonic()
        for _ in range(args.connections):
            s = socket.create_connection((host, port), timeout=30)
            burst.append(s)
            send_all(s, completion_request(args, host))
        for s in burst:
            got = read_response(s, 30)
            key = "closed unanswered" if got is None else got[0]
            statuses[key] = statuses.get(key, 0) + 1
            if got is not None:
                expect(got[1].get("connection") == "close", f"no Connection: close: {got[1]}")
                check_error_body(got[2], 503, "ServiceUnavailableError",
                                 f"--max-http-workers {workers}")
        took = time.monotonic() - start
    finally:
        stop.set()
        sampler.join()
        for s in burst + held:
            s.close()
    print(f"--max-http-workers {workers}: {args.connections} more connections: {statuses} in "
          f"{took:.2f} s; server threads {idle_threads} idle -> peak {peak[0]}")
    expect(set(statuses) == {503}, f"not all answered 503: {statuses}")
    expect(peak[0] <= idle_threads + workers,
           f"the server ran {peak[0]} threads (idle {idle_threads} + {workers} workers)")
    wait_for("a new connection to be served again",
             lambda: http(args.base_url, "GET", "/health")[0] == 200, 10)


CHECKS = {f.__name__: f for f in [early_answers, overload_then_drain, worker_bound]}


def main():
    def more(p):
        p.add_argument("--api-key", default="")
        p.add_argument("--server-pid", type=int, default=0)
        p.add_argument("--max-http-workers", type=int, default=16)
    return run_check(CHECKS, more)


if __name__ == "__main__":
    raise SystemExit(main())
