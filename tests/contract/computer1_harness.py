"""What the computer-1 contract tests run against.

The system under test is real: Harbor 0.26.0's agent factory, ``Computer1`` (and our subclass), Harbor's
``LiteLLM``, litellm and the OpenAI SDK, talking HTTP to a real server on 127.0.0.1. Two pieces here
stand in for the outside world:

- ``SessionServer`` is a real HTTP server (stdlib, in a thread) playing the session gateway: it records
  each request's path, headers and JSON body and answers with a scripted OpenAI chat completion.
- ``RecordingSandbox`` is the only test double: the desktop sandbox that computer-1's runtime reaches
  through ``BaseEnvironment.exec``. It records every command, answers the liveness and window probes the
  runtime polls for, returns a real WebP/PNG of the desktop size when a screenshot is read back, and
  keeps the files the agent writes (``final_answer.txt``). Everything else succeeds with no output, as
  xdotool does.
"""

from __future__ import annotations

import base64
import io
import json
import re
import shlex
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from harbor.environments.base import ExecResult
from PIL import Image

# Harbor 0.26.0's own prompt texts, which tell the call sites apart independently of our markers.
FULL_SUMMARY_PROMPT = "You are about to hand off work to a continuation of yourself"
SHORT_SUMMARY_PROMPT = "Briefly summarize progress on this task"
FALLBACK_PROMPT = "briefly provide the final answer to this task"

CLICK_CENTRE = {
    "analysis": "A page.",
    "plan": "Click the centre.",
    "action": {"type": "click", "x": 500, "y": 500},
}


# ---------------------------------------------------------------------------------------------------
# The session gateway stand-in


@dataclass(frozen=True)
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt_text(self) -> str:
        """The text of the last message (the call site's own prompt)."""
        content = self.body["messages"][-1]["content"]
        if isinstance(content, str):
            return content
        return "\n".join(part.get("text", "") for part in content if part.get("type") == "text")

    @property
    def site(self) -> str:
        """Which computer-1 call site sent this, judged from Harbor's prompt text alone."""
        text = self.prompt_text
        if FULL_SUMMARY_PROMPT in text:
            return "compaction_summary"
        if SHORT_SUMMARY_PROMPT in text:
            return "compaction_short_summary"
        if FALLBACK_PROMPT in text:
            return "final_answer"
        return "agent_turn"

    def image_urls(self) -> list[str]:
        return [
            part["image_url"]["url"]
            for message in self.body["messages"]
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "image_url"
        ]


def completion(content: str, model: str = "served") -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
    }


def scripted_reply(request: Request) -> tuple[int, dict[str, Any]]:
    """Clicks for agent turns; the full summary is refused as too long, which makes Harbor fall back to
    the short summary (a context-length error is not retried, so this costs no back-off)."""
    site = request.site
    if site == "compaction_summary":
        return 400, {
            "error": {
                "message": "This model's maximum context length is 9000 tokens.",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
    if site == "compaction_short_summary":
        return 200, completion("Clicked the centre once.")
    if site == "final_answer":
        return 200, completion("No answer found.")
    return 200, completion(json.dumps(CLICK_CENTRE))


class SessionServer:
    """A real HTTP server on 127.0.0.1 that records every request and replies from a script."""

    def __init__(self, reply: Callable[[Request], tuple[int, dict[str, Any]]] = scripted_reply) -> None:
        self.requests: list[Request] = []
        lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = Request(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=json.loads(self.rfile.read(length)),
                )
                with lock:
                    server.requests.append(request)
                status, payload = reply(request)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def url(self, path: str = "/v1") -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{path}"

    def __enter__(self) -> SessionServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------------
# The desktop sandbox double

_B64_READ = re.compile(r"^base64 -w0 (\S+) 2>/dev/null \|\| base64 \S+$")
_WRITE = re.compile(r"printf '%s' (\S+) \| base64 -d > (\S+)$")
_TEST_FILE = re.compile(r"^test -f (\S+)$")


def desktop_image(width: int, height: int, fmt: str) -> bytes:
    """A real image of the desktop size: a few flat bands, so any resampling keeps it decodable."""
    image = Image.new("RGB", (width, height), (240, 240, 240))
    for i, colour in enumerate([(200, 30, 30), (30, 160, 30), (30, 30, 200)]):
        image.paste(colour, (0, i * height // 4, width, i * height // 4 + height // 8))
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


class RecordingSandbox:
    """Stands in for the desktop sandbox behind ``BaseEnvironment.exec`` (the only double in these tests).

    ``cwebp=False`` imitates a sandbox without ``cwebp``: Harbor then copies PNG bytes into the ``.webp``
    file it reads back.
    """

    default_user: str | int | None = None

    def __init__(self, width: int, height: int, *, cwebp: bool = True) -> None:
        self.width, self.height, self.cwebp = width, height, cwebp
        self.commands: list[str] = []
        self.files: dict[str, bytes] = {}
        self._x_running = False

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        self.commands.append(command)
        return ExecResult(**self._answer(command))

    def _answer(self, command: str) -> dict[str, Any]:
        if m := _B64_READ.match(command):
            fmt = "WEBP" if m.group(1).endswith(".webp") and self.cwebp else "PNG"
            data = desktop_image(self.width, self.height, fmt)
            return {"stdout": base64.b64encode(data).decode(), "return_code": 0}
        if m := _WRITE.search(command):
            self.files[shlex.split(m.group(2))[0]] = base64.b64decode(shlex.split(m.group(1))[0])
            return {"stdout": "", "return_code": 0}
        if m := _TEST_FILE.match(command):
            return {"stdout": "", "return_code": 0 if shlex.split(m.group(1))[0] in self.files else 1}
        if "Xvfb :1" in command:
            self._x_running = True
        if "echo present || echo missing" in command:
            return {"stdout": "present" if self._x_running else "missing", "return_code": 0}
        if "echo ok || echo wait" in command:
            return {"stdout": "ok" if self._x_running else "wait", "return_code": 0}
        if "echo ok || echo down" in command:
            return {"stdout": "ok", "return_code": 0}
        if "echo up || echo down" in command:
            return {"stdout": "up", "return_code": 0}
        if "wmctrl -l" in command and "head -1" in command and "wid=" not in command:
            return {"stdout": "0x02000003  0 sandbox Chromium", "return_code": 0}
        return {"stdout": "", "return_code": 0}

    def xdotool(self) -> list[str]:
        return [c for c in self.commands if "xdotool" in c]
