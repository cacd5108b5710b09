"""``make ui-screenshot``: the CDC view in Airflow's UI, as a person sees it in a browser.

1. The demo's state (``make demo``, which the Makefile runs first when
   ``.demo/airflow/cdc_state.db`` is missing): its AIRFLOW_HOME holds the DAG runs and the
   state store.
2. Airflow's api-server on 127.0.0.1 (a free port, one worker) on that home, with the CDC
   plugin the package registers, and SimpleAuthManager's user ``viewer`` (role viewer) with a
   password written for this run.
3. Headless Chromium (Debian's ``chromium`` and ``chromium-driver``, through selenium) opens
   the CDC page of Airflow's navigation (``/plugin/cdc``), is sent to the login page, logs in,
   waits until the view shows the streams and windows, and saves ``build/ui-screenshot.png``.

Last line: ``ui-screenshot: OK streams=<n> windows=<n> path=build/ui-screenshot.png``.
The same pieces (:class:`ViewServer`, :func:`chromium`, :func:`log_in`, :func:`open_view`)
serve the UI tests.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from demo.services import AirflowServices

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
VIEW_ROUTE = "/plugin/cdc"  # the CDC page inside Airflow's UI (the plugin's url_route)


class ViewServer:
    """Airflow's api-server alone, with the CDC plugin, users ``viewer`` and ``admin``.

    ``airflow_home`` is the home to serve (its metadata DB, its ``cdc_state.db``); ``env``
    adds settings (a ``cdc_state_default`` connection ...). Use it as a context manager.
    """

    def __init__(self, base: Path, airflow_home: Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        base.mkdir(parents=True, exist_ok=True)
        self.passwords = {"viewer": secrets.token_urlsafe(12), "admin": secrets.token_urlsafe(12)}
        passwords_file = base / "simple_auth_manager_passwords.json"
        passwords_file.write_text(json.dumps(self.passwords))
        passwords_file.chmod(0o600)
        empty_dags = base / "dags"
        empty_dags.mkdir(exist_ok=True)
        settings = {
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,admin:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(24),
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            **({"AIRFLOW_HOME": str(airflow_home)} if airflow_home else {}),
            **dict(env or {}),
        }
        self.services = AirflowServices(base, empty_dags, settings)
        self.url = f"http://127.0.0.1:{self.services.api_port}"

    def __enter__(self) -> ViewServer:
        try:
            self.services.start(("api-server",))
            self.services.wait_for("the api-server to answer", self._healthy, timeout=120, every=0.5)
        except BaseException:
            self.services.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.services.stop()

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=5) as reply:
                return reply.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def token(self, user: str = "viewer") -> str:
        """A JWT for ``user`` from the auth manager's token endpoint."""
        body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
        request = urllib.request.Request(f"{self.url}/auth/token", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())["access_token"]

    def get(self, path: str, token: str | None = None) -> tuple[int, str, bytes]:
        """(status, content type, body) of a GET, with the bearer ``token`` if given."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(f"{self.url}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, reply.headers.get("content-type", ""), reply.read()
        except urllib.error.HTTPError as error:
            return error.code, error.headers.get("content-type", ""), error.read()


def chromium(width: int = 1440, height: int = 1300):
    """Headless Chromium driven through chromedriver (Debian's packages)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: `make system-packages` installs "
                           f"Debian's chromium and chromium-driver")
    options = Options()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--hide-scrollbars",
                     "--force-device-scale-factor=1", "--lang=en-US"):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))


def log_in(driver, server: ViewServer, user: str = "viewer", timeout: float = 180,
           attempts: int = 3) -> None:
    """Open the CDC page as a stranger: the UI sends the browser to the login page; fill it in.

    The login form's inputs are React-controlled: on a loaded machine a re-render can drop
    typed characters, and the form then stays on the login page with an error. So the
    typed values are read back before submitting, and a login that does not reach the page
    is tried again (``attempts`` in all) before failing with the URL and text the browser shows.
    A login that lands elsewhere with its session kept (CI once: ``/plugin/cdc/cdc/``) loads
    the page itself.
    A page that renders neither the login form nor the CDC page within its share of ``timeout``
    is loaded again, as one of the attempts.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{server.url}{VIEW_ROUTE}")
    wait = WebDriverWait(driver, timeout / attempts)
    fields = {"username": user, "password": server.passwords[user]}

    def filled(d) -> bool:
        for name, text in fields.items():
            field = d.find_element(By.CSS_SELECTOR, f"input[name={name}]")
            if field.get_property("value") != text:
                field.clear()
                field.send_keys(text)
                return False
        return True

    def arrived(d) -> bool:
        return d.current_url.split("?")[0].rstrip("/").endswith(VIEW_ROUTE)

    def shown(d) -> bool:  # the page, or the login form
        return arrived(d) or bool(d.find_elements(By.CSS_SELECTOR, "input[name=username]"))

    for _ in range(attempts):
        try:
            wait.until(shown)
        except TimeoutException:  # neither page rendered (CI saw this once): load it again
            driver.get(f"{server.url}{VIEW_ROUTE}")
            continue
        if arrived(driver):
            return
        wait.until(filled)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        try:
            wait.until(arrived)
            return
        except TimeoutException:
            pass
        if not driver.find_elements(By.CSS_SELECTOR, "input[name=username]"):
            # Logged in but sent elsewhere (CI once: /plugin/cdc/cdc/, Airflow's shell with no
            # page): the session holds, so the page itself is loaded.
            driver.get(f"{server.url}{VIEW_ROUTE}")
            try:
                wait.until(shown)
            except TimeoutException:
                continue
            if arrived(driver):
                return
    text = driver.find_element(By.TAG_NAME, "body").text[:500]
    raise RuntimeError(f"logging in as {user!r} did not reach {VIEW_ROUTE} after {attempts} "
                       f"attempts: the browser shows {driver.current_url} with {text!r}")


@dataclass(frozen=True)
class ViewSeen:
    """What the page showed: the streams table's ids, the selected stream, its windows' starts,
    its partitions' ids and the text of the page."""

    streams: list[str]
    selected: str
    windows: list[str]
    partitions: list[str]
    text: str


def open_view(driver, server: ViewServer, stream: str | None = None,
              timeout: float = 180, attempts: int = 4, user: str = "viewer") -> ViewSeen:
    """Open the CDC page in Airflow's UI (logged in as ``user``), optionally select ``stream``,
    and read what it shows once its data (and its chart) loaded. Leaves the driver in the
    page's frame.

    Airflow's UI mounts the page's frame once its own scripts ran; on a loaded machine it has
    once shown the page's URL with no frame for minutes (CI). A page with no frame within its
    share of ``timeout`` is loaded again; a load that lands on the login page (CI once: the
    session of a login that reached the page's URL was not kept) logs in again. ``attempts``
    in all, then it fails with the URL and text the browser shows.
    """
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(driver, timeout)
    if not driver.current_url.rstrip("/").endswith(VIEW_ROUTE):
        driver.get(f"{server.url}{VIEW_ROUTE}")
    frame = None
    for attempt in range(attempts):
        driver.switch_to.default_content()
        try:
            [found] = WebDriverWait(driver, timeout / attempts).until(
                lambda d: (d.find_elements(By.CSS_SELECTOR, "iframe")
                           or d.find_elements(By.CSS_SELECTOR, "input[name=username]"))[:1])
        except TimeoutException:
            if attempt + 1 < attempts:
                driver.get(f"{server.url}{VIEW_ROUTE}")
            continue
        if found.tag_name == "iframe":
            frame = found
            break
        if attempt + 1 < attempts:
            log_in(driver, server, user, timeout=timeout / attempts, attempts=1)
    if frame is None:
        text = driver.find_element(By.TAG_NAME, "body").text[:500]
        raise RuntimeError(f"the CDC page's frame did not appear after {attempts} loads: the browser "
                           f"shows {driver.current_url} with {text!r}")
    driver.switch_to.frame(frame)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    if stream:
        driver.find_element(By.CSS_SELECTOR, f"#streams tr[data-stream='{stream}']").click()
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded")
                   == stream)
    wait.until(lambda d: d.execute_script(
        "const i = document.getElementById('chart'); return i.complete && i.naturalWidth > 0;"))

    def ids(selector: str, attribute: str) -> list[str]:
        return [row.get_attribute(attribute) for row in driver.find_elements(By.CSS_SELECTOR, selector)]

    return ViewSeen(
        streams=ids("#streams tbody tr", "data-stream"),
        selected=driver.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"),
        windows=ids("#windows tbody tr", "data-window"),
        partitions=ids("#partitions tbody tr", "data-partition"),
        text=driver.find_element(By.TAG_NAME, "body").text,
    )


def save_screenshot(driver, path: Path, min_height: int = 900) -> Path:
    """The whole UI with the page's full height (the window grows until the page's frame
    holds all of it), as a PNG."""
    frame_selector = "iframe"
    for _ in range(4):
        driver.switch_to.default_content()
        frame = driver.find_element("css selector", frame_selector)
        shown = frame.size["height"]
        driver.switch_to.frame(frame)
        content = driver.execute_script("return document.documentElement.scrollHeight;")
        driver.switch_to.default_content()
        if content <= shown:
            break
        size = driver.get_window_size()
        driver.set_window_size(size["width"], max(min_height, size["height"] + content - shown + 24))
        time.sleep(0.5)  # let the UI lay out the taller window
    path.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(path)):
        raise RuntimeError(f"chromium could not save the screenshot {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=str(ROOT / ".demo" / "airflow"),
                        help="the AIRFLOW_HOME to serve (default: the demo's)")
    parser.add_argument("--output", default="build/ui-screenshot.png")
    parser.add_argument("--stream", help="the stream to show (default: the one needing attention)")
    args = parser.parse_args(argv)
    home = Path(args.home).resolve()
    if not (home / "cdc_state.db").exists():
        raise SystemExit(f"ui-screenshot: {home / 'cdc_state.db'} is missing: run `make demo` first")
    output = Path(args.output)
    base = ROOT / "build" / "ui-screenshot-server"
    shutil.rmtree(base, ignore_errors=True)
    started = time.monotonic()
    with ViewServer(base, airflow_home=home) as server:
        print(f"ui-screenshot: api-server with the CDC plugin at {server.url}", flush=True)
        driver = chromium()
        try:
            log_in(driver, server)
            seen = open_view(driver, server, args.stream)
            save_screenshot(driver, output)
        except Exception as error:
            print(f"ui-screenshot: FAILED at {driver.current_url}: {type(error).__name__}: "
                  f"{error}\n{server.services.log_tails(30)}", file=sys.stderr)
            return 1
        finally:
            driver.quit()
    if not seen.streams or not seen.windows:
        print(f"ui-screenshot: the view showed streams={seen.streams} windows={seen.windows}:\n"
              f"{seen.text}", file=sys.stderr)
        return 1
    print(f"ui-screenshot: stream {seen.selected}: windows {', '.join(seen.windows)}; "
          f"{len(seen.partitions)} live partition(s) shown ({time.monotonic() - started:.0f} s)",
          flush=True)
    print(f"ui-screenshot: OK streams={len(seen.streams)} windows={len(seen.windows)} "
          f"path={args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
