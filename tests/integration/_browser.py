"""Headless Chromium driven over the DevTools protocol (websockets), so a test can log in
the way the Airflow UI does (its ``_token`` JWT cookie) before loading a page.

``Browser(base_url)``: ``.set_token(jwt)`` sets the cookie, ``.open(url, screenshot=path)``
loads the page, waits for it and its images, returns the DOM (outerHTML) and saves a PNG.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError("chromium not installed: apt-get install -y chromium")


class Browser:
    def __init__(self, base_url: str, width: int = 1400, height: int = 1800):
        self.base_url, self.size = base_url, (width, height)
        self.profile = tempfile.mkdtemp(prefix="chromium-cdp-")
        self.proc = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             "--disable-background-networking", "--disable-component-update", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as resp:
            page = next(t for t in json.loads(resp.read()) if t["type"] == "page")
        self.ws = connect(page["webSocketDebuggerUrl"], max_size=64 * 2 ** 20, open_timeout=20)
        self.ids = itertools.count(1)
        for method in ("Page.enable", "Network.enable", "Runtime.enable"):
            self.call(method)
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)

    def call(self, method: str, timeout: float = 60, **params):
        mid = next(self.ids)
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def set_token(self, token: str) -> None:
        self.call("Network.clearBrowserCookies")
        ok = self.call("Network.setCookie", name="_token", value=token, url=self.base_url + "/",
                       httpOnly=True, sameSite="Lax")
        assert ok.get("success", True)

    def evaluate(self, expr: str):
        return self.call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

    def open(self, url: str, screenshot: Path | None = None, settle: float = 30, wait_for: str = "") -> str:
        """Load ``url``; wait until the document and its images are complete and, with
        ``wait_for`` (a CSS selector), until such an element exists (the Airflow UI is a React
        app that renders after ``load``)."""
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + settle
        ready = "document.readyState === 'complete' && Array.from(document.images).every(i => i.complete)"
        if wait_for:
            ready = f"({ready}) && document.querySelector({json.dumps(wait_for)}) !== null"
        while time.monotonic() < deadline:
            time.sleep(0.3)
            if self.evaluate(ready):
                break
        time.sleep(0.5)
        dom = self.evaluate("document.documentElement.outerHTML") or ""
        if screenshot is not None:
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return dom

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)
