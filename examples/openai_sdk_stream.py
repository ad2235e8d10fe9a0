#!/usr/bin/env python3
"""Stream from haq's simulated cluster with the official OpenAI Python SDK, unchanged.

    haq sim up --replicas 3          # prints: gateway http://127.0.0.1:PORT/v1
    pip install openai
    python3 examples/openai_sdk_stream.py http://127.0.0.1:PORT/v1

Prints the streamed answer, the usage chunk, the finish reason, and which worker and
attempt served it (the gateway's x-haq-worker / x-haq-attempt headers). Exits non-zero
if anything an OpenAI client relies on is missing.
"""
import sys

from openai import OpenAI


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
    client = OpenAI(base_url=base, api_key="not-needed")

    models = client.models.list()
    model = models.data[0].id

    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[{"role": "user", "content": "Why does a gateway fence an attempt before retrying?"}],
        max_tokens=24,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers={"x-request-id": "sdk-example-1"},
    )
    worker = raw.headers.get("x-haq-worker")
    attempt = raw.headers.get("x-haq-attempt")
    text, finish, usage = [], None, None
    for chunk in raw.parse():
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                text.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    print("".join(text).strip())
    print(f"finish_reason={finish} usage={usage} worker={worker} attempt={attempt}")

    whole = client.completions.create(model=model, prompt="hello", max_tokens=4, temperature=0)
    print(f"completions: {whole.choices[0].text!r} ({whole.usage.completion_tokens} tokens)")

    ok = (
        len(text) == 24
        and finish == "length"
        and usage is not None
        and usage.completion_tokens == 24
        and worker
        and attempt == "sdk-example-1/a1"
        and whole.usage.completion_tokens == 4
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
