#!/usr/bin/env python3
"""A tiny OpenAI-compatible upstream that records what a gateway forwards.

Every request is appended to LOG as one JSON line: time, method, path, every header as
received, the body (parsed when JSON). /v1/chat/completions and /v1/completions answer a
stream of `tok ` deltas (or one JSON body when "stream" is false) with an x-request-id
echo; /health, /v1/models and /model_info answer 200. Listens on 127.0.0.1 only.

    echo-upstream.py PORT LOG [--tokens N] [--itl-ms MS]

Use it in place of a llama-server (UPSTREAMS=127.0.0.1:PORT) to see which request headers
(x-request-id, ...) and body fields (the OpenAI `user`, `metadata`, ...) a gateway forwards;
it is also the plain `tok tok tok` server of issue 21 item 3.
"""
import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *_):  # quiet: the JSON log is the record
        pass

    def _record(self, body: bytes):
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = body.decode("utf-8", "replace")
        rec = {
            "t": round(time.time(), 3),
            "mono": round(time.monotonic(), 6),
            "peer": f"{self.client_address[0]}:{self.client_address[1]}",
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body": parsed,
        }
        with LOCK, open(self.server.log, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return parsed

    def _send(self, code, obj, extra=()):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._record(b"")
        if self.path.startswith("/v1/models"):
            self._send(200, {"object": "list", "data": [{"id": "gemma", "object": "model"}]})
        else:
            self._send(200, {"status": "ok"})

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(n) if n else b""
        req = self._record(body) or {}
        rid = self.headers.get("x-request-id", "")
        extra = [("x-request-id", rid)] if rid else []
        extra.append(("x-upstream-port", str(self.server.server_address[1])))
        cid = f"chatcmpl-echo-{int(time.time() * 1000)}"
        toks = min(int(req.get("max_tokens") or self.server.tokens), self.server.tokens)
        if not isinstance(req, dict) or not req.get("stream"):
            self._send(200, {"id": cid, "object": "chat.completion", "model": "gemma",
                             "choices": [{"index": 0, "finish_reason": "length",
                                          "message": {"role": "assistant", "content": "tok " * toks}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": toks, "total_tokens": toks + 1}},
                       extra)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()

        def event(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        base = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": "gemma"}
        try:
            event({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
            for _ in range(toks):
                time.sleep(self.server.itl)
                event({**base, "choices": [{"index": 0, "delta": {"content": "tok "}, "finish_reason": None}]})
            event({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
            event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("log")
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--itl-ms", type=float, default=20)
    a = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.log, srv.tokens, srv.itl = a.log, a.tokens, a.itl_ms / 1000
    srv.serve_forever()


if __name__ == "__main__":
    main()
