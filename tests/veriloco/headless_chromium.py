"""A real browser for tests: Debian's Chromium, headless, driven over the DevTools protocol on a
pipe (``--remote-debugging-pipe``: JSON messages ending in NUL on file descriptors 3 and 4), so
no websocket client is needed. ``make test`` installs Chromium (the Makefile's ``browser`` target)."""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


# Flags for a machine with a closed network, run as root: without the background-networking ones
# Chromium keeps dialling Google's hosts at start.
FLAGS = ["--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
LAUNCHES = 3  # a browser that dies while starting is the machine's fault, not the page's: start it again


class BrowserExited(ConnectionError):
    """Chromium is gone; the message carries the end of its own log."""


class HeadlessChromium:
    """One headless Chromium with one page at ``url``. Its log lies beside ``profile``."""

    def __init__(self, url: str, profile: Path, width: int = 1280, height: int = 1200) -> None:
        binary = chromium_binary()
        if binary is None:
            raise FileNotFoundError("chromium is not installed (apt-get install chromium; make test does)")
        for launch in range(1, LAUNCHES + 1):
            self._start(binary, profile.with_name(f"{profile.name}-{launch}"), url, width, height)
            try:
                self.session = self._attach(url)
                return
            except (BrowserExited, TimeoutError):
                self.close()
                if launch == LAUNCHES:
                    raise

    def _start(self, binary: str, profile: Path, url: str, width: int, height: int) -> None:
        profile.mkdir(parents=True, exist_ok=True)
        self.log = profile.with_suffix(".log")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends go above 4 first, so that moving them onto 3 and 4 cannot overwrite each other.
        child_r, child_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)

        def fds() -> None:  # the browser reads commands on fd 3 and writes answers on fd 4
            os.dup2(child_r, 3)
            os.dup2(child_w, 4)

        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [binary, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", url],
                preexec_fn=fds, pass_fds=(3, 4), stdout=log, stderr=log)  # 3 and 4 stay open past preexec_fn
        os.close(child_r)
        os.close(child_w)
        self._buffer = b""
        self._next_id = 0

    def _exited(self) -> BrowserExited:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return BrowserExited(f"chromium closed its pipe but still runs; its log {self.log}")
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        return BrowserExited(f"chromium exited with {self.proc.returncode}; the end of its log:\n{tail}")

    def _send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
              timeout: float = 30.0) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:
            raise self._exited() from None
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not select.select([self._from_browser], [], [], remaining)[0]:
                    raise TimeoutError(f"chromium did not answer {method}")
                chunk = os.read(self._from_browser, 1 << 16)
                if not chunk:
                    raise self._exited()
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))

    def _attach(self, url: str) -> str:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            targets = self._send("Target.getTargets")["targetInfos"]
            pages = [t for t in targets if t["type"] == "page"]
            if pages:
                return str(self._send("Target.attachToTarget", {"targetId": pages[0]["targetId"],
                                                                 "flatten": True})["sessionId"])
            time.sleep(0.2)
        raise TimeoutError(f"no page for {url}")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        result = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll ``expression`` until it is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError as exc:  # the page is still loading: no JavaScript context yet
                if "execution context" not in str(exc):
                    raise
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout:.0f} s: {expression}")
            time.sleep(0.3)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page."""
        metrics = self._send("Page.getLayoutMetrics", session=self.session)
        size = metrics["cssContentSize"]
        data = self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": {
            "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        with contextlib.suppress(OSError, TimeoutError, RuntimeError, ConnectionError):  # already gone
            self._send("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)
