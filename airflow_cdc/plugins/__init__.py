"""The CDC view in the Airflow UI: an Airflow plugin the provider registers by entry point.

* :mod:`.cdc_view`: the plugin (entry point ``airflow.plugins``): its page in the navigation
  and the FastAPI app the api-server mounts at ``/cdc``;
* :mod:`.api`: that app: the page, its read-only JSON API and charts, all behind Airflow's
  auth manager (an anonymous request gets 401, a user who may not read DAG runs 403);
* :mod:`.payload`: what the API returns for streams, windows and partitions (never a secret:
  the state store's URL without its password, no resume tokens);
* ``static/``: the page (HTML, CSS, plain JavaScript; no CDN, no build step).

Everything is read from the state store through :mod:`airflow_cdc.pipeline.stream_health`
with bounded queries; nothing here writes.
"""
