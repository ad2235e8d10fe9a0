#!/usr/bin/env python3
"""A plain TCP relay: LISTEN=UPSTREAM pairs, byte for byte, on 127.0.0.1.

Stand-in for haq's proxy while a router starts: vllm-router and sglang-router do not listen
until every worker answers its health check, but haq's listen addresses exist only during
`haq run`, and `haq run` exits 2 unless the gateway answers at start. So: hold the listen
addresses with this relay, start the router, stop the relay, start `haq run` at once
(bin/hold-listens.sh does the first and third steps).

    bridge.py 127.0.0.1:19101=127.0.0.1:18081 127.0.0.1:19102=127.0.0.1:18082
"""
import asyncio
import sys


async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            w.close()
        except Exception:
            pass


def handler(upstream: str):
    host, port = upstream.rsplit(":", 1)

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(host, int(port))
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    return handle


async def main() -> None:
    servers = []
    for pair in sys.argv[1:]:
        listen, upstream = pair.split("=", 1)
        h, p = listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(handler(upstream), h, int(p), reuse_address=True))
        print(f"bridge {listen} -> {upstream}", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
