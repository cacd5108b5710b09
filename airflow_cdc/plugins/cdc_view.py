"""The Airflow plugin of airflow-cdc: the CDC view in the UI's navigation, served at ``/cdc``.

Registered through the ``airflow.plugins`` entry point (pyproject.toml), so installing the
package is enough: Airflow loads entry-point plugins in every process, and the api-server
mounts :func:`airflow_cdc.plugins.api.cdc_app` at ``/cdc`` and lists the page in its
navigation (``CDC``, shown inside the UI at ``/plugin/cdc``). Not also listed in the provider
info's ``plugins``: Airflow loads those only with ``[core] lazy_discover_providers`` off, and
then would report the same plugin twice.

The FastAPI app is built only when asked for (only the api-server asks), so a task process,
which loads plugins for their macros, never imports FastAPI routes for it.
"""

from __future__ import annotations

# The Task SDK's class where it exists (workers without Airflow core), else core's.
from airflow.providers.common.compat.sdk import AirflowPlugin

URL_PREFIX = "/cdc"


class CdcViewPlugin(AirflowPlugin):
    name = "airflow_cdc"
    external_views = [
        {
            "name": "CDC",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": "cdc",
            "nav_top_level": True,
            "icon": f"{URL_PREFIX}/static/icon.svg",
        }
    ]

    @property
    def fastapi_apps(self) -> list[dict]:  # type: ignore[override]
        from airflow_cdc.plugins.api import cdc_app

        return [{"app": cdc_app(), "url_prefix": URL_PREFIX, "name": "airflow-cdc CDC view"}]
