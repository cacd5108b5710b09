"""The FastAPI app of the CDC view, mounted by Airflow's api-server at ``/cdc``.

    GET /cdc/                                  the page (static/index.html)
    GET /cdc/static/<file>                     its script, style sheet and icon
    GET /cdc/api/streams                       every stream: state, freshness, lag, partitions,
                                               who holds its newest window's lease and until when
    GET /cdc/api/streams/<id>?windows=50&partitions=100&before=<start>
                                               one stream: its windows (open ones first, with
                                               step durations, the gate's reason and the lease's
                                               holder and expiry) and its live partitions
                                               (lagging ones first)
    GET /cdc/api/streams/<id>/chart.svg?last=48  its charts (also chart.png): airflow_cdc.charts

Every route, the page included, is behind Airflow's auth manager: the caller is identified as
the api-server's own routes identify it (``Authorization: Bearer <jwt>`` or the UI's session
cookie) and must be allowed to read DAG runs: an anonymous request gets 401, a forbidden one
403, and neither gets any data. Read-only; every query is bounded (limits below).

Configuration (``airflow.cfg`` or ``AIRFLOW__CDC__*``): ``[cdc] state_conn_id`` (the state
store's connection, default ``cdc_state_default``), ``[cdc] stall_seconds`` (a partition
whose watermark has not moved for this long is stalled, default 600).
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import FileResponse, JSONResponse, Response

STATIC = Path(__file__).resolve().parent / "static"
STATIC_FILES = {
    "view.js": "text/javascript",
    "view.css": "text/css",
    "icon.svg": "image/svg+xml",
}
MAX_WINDOWS = 500
MAX_PARTITIONS = 1000
MAX_CHART_WINDOWS = 1000
CHART_MEDIA_TYPES = {"png": "image/png", "svg": "image/svg+xml"}


async def require_reader(request: Request) -> None:
    """The caller as Airflow's own API authenticates it, allowed to read DAG runs.

    No credential: 401; an invalid one or a user without read access to DAG runs: 403.
    (Airflow's security module is imported here, not at import time: every Airflow process
    loads plugins, only the api-server serves them.)
    """
    from fastapi.security import HTTPBearer

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import get_user

    credentials = await HTTPBearer(auto_error=False)(request)
    user = await get_user(request, None, credentials)
    allowed = get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.RUN, user=user
    )
    if not allowed:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "Forbidden: the CDC view shows DAG runs' windows; it needs read access to DAG runs",
        )


class StateStores:
    """One StateStore per state store URL, migrated once, shared by the app's threads."""

    def __init__(self) -> None:
        self._stores: dict[str, object] = {}
        self._lock = threading.Lock()

    def get(self):
        from airflow.configuration import conf

        from airflow_cdc.hooks.state import CdcStateHook

        hook = CdcStateHook(cdc_state_conn_id=conf.get("cdc", "state_conn_id",
                                                        fallback="cdc_state_default"))
        url = hook.get_url()
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = hook.get_store()
                self._stores[url] = store
            return store


def stall_seconds() -> float:
    from airflow.configuration import conf

    from airflow_cdc.pipeline.stream_health import DEFAULT_STALL_SECONDS

    return conf.getfloat("cdc", "stall_seconds", fallback=DEFAULT_STALL_SECONDS)


def _stream(store, stream_id: str):
    for stream in store.streams():
        if stream.stream_id == stream_id:
            return stream
    raise HTTPException(
        status.HTTP_404_NOT_FOUND,
        f"stream {stream_id!r} is not in the state store {store.url}: a pipeline registers its "
        f"stream when it plans its first window; GET /cdc/api/streams lists the streams",
    )


def _before(text: str | None) -> datetime | None:
    from airflow_cdc.model import parse_ts

    if not text:
        return None
    try:
        return parse_ts(text)
    except ValueError as error:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_ENTITY,
            f"before={text!r} is not an ISO-8601 instant (2024-05-01T10:00:00Z): {error}",
        ) from error


def create_app() -> FastAPI:
    """The view's app; routes are defined here, their heavy imports happen per request."""
    app = FastAPI(
        title="airflow-cdc: the CDC view",
        description="Streams, windows, partitions and charts of airflow-cdc's state store "
        "(read-only).",
        dependencies=[Depends(require_reader)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    stores = StateStores()
    app.add_exception_handler(Exception, state_store_unavailable)
    _page_routes(app)
    _stream_routes(app, stores)
    _chart_route(app, stores)
    return app


async def state_store_unavailable(request: Request, error: Exception) -> JSONResponse:
    """Any error of a route: 503, the state store could not be read.

    The store's own messages name the URL without its password; anything else is
    summarised by its type so a driver's message cannot leak a connection string.
    """
    from airflow_cdc.model import CdcError

    detail = str(error) if isinstance(error, CdcError) else type(error).__name__
    return JSONResponse(
        {"detail": f"the state store could not be read: {detail}"},
        status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
    )


def _page_routes(app: FastAPI) -> None:
    """``/`` (the page) and ``/static/<file>`` (its script, style sheet and icon)."""

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html",
                            headers={"Cache-Control": "no-store"})

    @app.get("/static/{name}", include_in_schema=False)
    def static_file(name: str) -> FileResponse:
        if name not in STATIC_FILES:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no static file {name!r}")
        return FileResponse(STATIC / name, media_type=STATIC_FILES[name])


def _stream_routes(app: FastAPI, stores: StateStores) -> None:
    """``/api/streams`` (every stream) and ``/api/streams/<id>`` (one, with its windows and
    partitions)."""

    @app.get("/api/streams")
    def list_streams() -> dict:
        from airflow_cdc.pipeline.stream_health import stream_health
        from airflow_cdc.plugins.payload import stream_payload

        store = stores.get()
        now = datetime.now(timezone.utc)
        return {
            "state_store": store.url,
            "now": now.isoformat(),
            "streams": [stream_payload(stream_health(store, s, now), now)
                        for s in store.streams()],
        }

    @app.get("/api/streams/{stream_id}")
    def one_stream(
        stream_id: str,
        windows: int = Query(50, ge=1, le=MAX_WINDOWS),
        partitions: int = Query(100, ge=1, le=MAX_PARTITIONS),
        before: str | None = None,
    ) -> dict:
        from airflow_cdc.pipeline.stream_health import (
            partition_health,
            stream_health,
            window_health,
        )
        from airflow_cdc.plugins.payload import (
            covered_by_window,
            partition_payload,
            stream_payload,
            window_payload,
        )

        store = stores.get()
        stream = _stream(store, stream_id)
        now = datetime.now(timezone.utc)
        health = stream_health(store, stream, now)
        shown = window_health(store, stream_id, windows, before=_before(before),
                              open_first=before is None, source_kind=stream.source_kind)
        rows = partition_health(store, stream_id, now, partitions, health.behind,
                                stall_seconds())
        covered = covered_by_window(store.covered_intervals(
            stream_id, window_starts=[w.record.start for w in shown]))
        return {
            "state_store": store.url,
            "now": now.isoformat(),
            "stream": stream_payload(health, now),
            "windows": [window_payload(w, now, covered.get(w.record.start, ())) for w in shown],
            "more_windows": len(shown) == windows and health.windows > len(shown),
            "partitions": [partition_payload(p) for p in rows],
            "more_partitions": max(0, health.live_partitions - len(rows)),
        }


def _chart_route(app: FastAPI, stores: StateStores) -> None:
    """``/api/streams/<id>/chart.svg`` (or ``.png``): the stream's charts."""

    @app.get("/api/streams/{stream_id}/chart.{fmt}")
    def chart(stream_id: str, fmt: str,
              last: int = Query(48, ge=1, le=MAX_CHART_WINDOWS)) -> Response:
        from airflow_cdc.charts import window_chart
        from airflow_cdc.pipeline.stream_health import window_health

        if fmt not in CHART_MEDIA_TYPES:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"charts are served as chart.png or chart.svg, not chart.{fmt}")
        store = stores.get()
        _stream(store, stream_id)
        shown = window_health(store, stream_id, last, gate_reasons=0)
        if not shown:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"stream {stream_id!r} has no windows yet: nothing to chart")
        body = window_chart(stream_id, shown, fmt, now=datetime.now(timezone.utc))
        return Response(body, media_type=CHART_MEDIA_TYPES[fmt],
                        headers={"Cache-Control": "no-store"})


@cache
def cdc_app() -> FastAPI:
    """The one app of this process (the api-server asks for it once)."""
    return create_app()
