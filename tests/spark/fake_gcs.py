"""fake-gcs-server (github.com/fsouza/fake-gcs-server, Go) for the tests whose client needs
what ``gcp-storage-emulator`` does not serve: the GCS connector (Hadoop's ``gs://`` file
system) sends JSON API batch requests and copies objects.

The server is built once with the machine's Go toolchain, from the Go module proxy, into the
tool cache (``$AIRFLOW_CDC_TOOLS_DIR``, else ``~/.cache/airflow-cdc/bin``), and started by a
fixture in memory on 127.0.0.1 with one bucket.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from .support import free_port

VERSION = "v1.56.1"
MODULE = "github.com/fsouza/fake-gcs-server"


def tools_dir() -> Path:
    configured = os.environ.get("AIRFLOW_CDC_TOOLS_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "airflow-cdc" / "bin"


def fake_gcs_server_binary() -> Path:
    """The server's binary in the tool cache, built there first when missing (``go install``;
    it lands under a temporary folder and is renamed, so a concurrent build never leaves a
    partial binary)."""
    target = tools_dir() / f"fake-gcs-server-{VERSION}"
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"{target} is missing and there is no Go toolchain (go) to build "
                           f"{MODULE}@{VERSION} with: install Go")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fake-gcs-", dir=target.parent) as gobin:
        proc = subprocess.run([go, "install", f"{MODULE}@{VERSION}"], capture_output=True,
                              text=True, env={**os.environ, "GOBIN": gobin})
        built = Path(gobin, "fake-gcs-server")
        if not built.is_file():
            raise RuntimeError(f"go install {MODULE}@{VERSION} failed (exit {proc.returncode}): "
                               f"{proc.stderr[-2000:]}")
        os.replace(built, target)
    return target


class FakeGcsServer:
    """fake-gcs-server in memory on 127.0.0.1 with ``bucket``; ``url`` is its address."""

    def __init__(self, bucket: str) -> None:
        self.bucket = bucket
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen | None = None

    def _call(self, path: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.url}{path}", data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"}, method="GET" if body is None else "POST")
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)

    def objects(self, prefix: str = "") -> list[str]:
        """The bucket's object names under ``prefix``."""
        names, token = [], ""
        while True:
            page = self._call(f"/storage/v1/b/{self.bucket}/o?prefix={prefix}&pageToken={token}")
            names += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken", "")
            if not token:
                return sorted(names)

    def __enter__(self) -> FakeGcsServer:
        self._process = subprocess.Popen(
            [str(fake_gcs_server_binary()), "-scheme", "http", "-host", "127.0.0.1",
             "-port", str(self.port), "-backend", "memory", "-public-host",
             f"127.0.0.1:{self.port}", "-external-url", self.url, "-log-level", "warn"],
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60  # a readiness limit, not a speed assertion
        while True:
            try:
                self._call("/storage/v1/b?project=local")
                break
            except OSError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    self.__exit__()
                    raise RuntimeError(f"fake-gcs-server did not start on {self.url}")
                time.sleep(0.2)
        self._call("/storage/v1/b?project=local", {"name": self.bucket})
        return self

    def __exit__(self, *exc_info) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=30)
