"""Hook for Iceberg catalogs: turns an ``iceberg_catalog`` Airflow Connection into an
:class:`~airflow_cdc.spark.iceberg.IcebergCatalog`.

Connection fields (docs/catalogs.md has an ``AIRFLOW_CONN_...`` example per catalog):

* host: the catalog's URI: a REST endpoint (``https://...``; the port field completes one
  that names no port), a Hive metastore (``thrift://host:9083``, or a bare host with the port
  field) or a JDBC URL (``jdbc:postgresql://...``); extra ``uri`` overrides it. Empty for a
  Hadoop catalog.
* schema: the warehouse (a path or URI; for Polaris and Lakekeeper the catalog's name);
  extra ``warehouse`` overrides it.
* login / password: REST: OAuth2 client id and secret, or no login and a bearer token as
  password; JDBC: the database user and password.
* extra: ``kind`` (``hadoop``, ``jdbc``, ``rest``, ``hive``; by default ``rest`` with a
  flavor, else read from the URI), ``flavor`` (``biglake``, ``polaris``, ``lakekeeper``),
  ``project`` and ``location`` (BigLake), ``headers`` (an object), ``io_impl``,
  ``auth_type``, ``scope``, ``oauth2_server_uri``, ``vended_credentials``, ``token``,
  ``properties`` (an object of further catalog properties), ``spark_version`` and
  ``packages`` (where the Iceberg runtime comes from), ``extra_jars``,
  ``storage_emulator_host`` (a GCS emulator for a ``gs://`` warehouse: local development).

The Spark name of the catalog is not the connection's to choose: it is ``catalog_name``
(``lake``), the name the jobs' SQL and the pipeline's Assets use. Reading the connection
contacts no server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow.providers.common.compat.sdk import BaseHook

from airflow_cdc.spark.iceberg import KINDS, REST_FLAVORS, IcebergCatalog

DEFAULT_CONN_ID = "iceberg_catalog_default"
CONN_TYPE = "iceberg_catalog"
HIVE_METASTORE_PORT = 9083
# Extra keys and the IcebergCatalog field each sets (None: handled by name below).
_EXTRA_FIELDS = {
    "kind": "kind", "flavor": "flavor", "uri": "uri", "warehouse": "warehouse",
    "io_impl": "io_impl", "auth_type": "auth_type", "scope": "scope",
    "oauth2_server_uri": "oauth2_server_uri", "token": "token",
    "vended_credentials": "vended_credentials", "spark_version": "spark_version",
    "headers": "headers", "properties": "properties", "packages": "packages",
    "extra_jars": "extra_jars", "project": None, "location": None,
    "storage_emulator_host": "storage_emulator_host",
}


class IcebergCatalogConnectionError(ValueError):
    """An ``iceberg_catalog`` connection does not describe a usable catalog."""


class IcebergCatalogHook(BaseHook):
    """Builds the Iceberg catalog an ``iceberg_catalog`` Airflow Connection describes.

    :param iceberg_conn_id: the ``iceberg_catalog`` connection.
    :param catalog_name: the catalog's name in Spark (``<catalog>.<namespace>.<table>``).
    """

    conn_name_attr = "iceberg_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = CONN_TYPE
    hook_name = "Iceberg catalog (airflow-cdc)"

    def __init__(
        self, iceberg_conn_id: str = DEFAULT_CONN_ID, catalog_name: str = "lake", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.iceberg_conn_id = iceberg_conn_id
        self.catalog_name = catalog_name

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        # Airflow < 3.2 reads this method; 3.2+ reads the same facts from provider info.
        return {
            "hidden_fields": [],
            "relabeling": UI_RELABELING,
            "placeholders": UI_PLACEHOLDERS,
        }

    def get_catalog(self) -> IcebergCatalog:
        """The catalog of the connection (secrets included: never log it whole)."""
        conn = self.get_connection(self.iceberg_conn_id)
        return catalog_from_connection(
            self.iceberg_conn_id,
            host=conn.host,
            port=conn.port,
            schema=conn.schema,
            login=conn.login,
            password=conn.password,
            extra=conn.extra_dejson,
            catalog_name=self.catalog_name,
        )

    def test_connection(self) -> tuple[bool, str]:
        """Checks the connection describes a valid catalog; contacts no server."""
        try:
            catalog = self.get_catalog()
        except Exception as exc:
            return False, str(exc)
        return True, f"a valid {catalog.kind} catalog description (the server was not contacted)"


def catalog_from_connection(
    conn_id: str,
    *,
    host: str | None,
    port: int | None,
    schema: str | None,
    login: str | None,
    password: str | None,
    extra: Mapping[str, Any] | None,
    catalog_name: str = "lake",
) -> IcebergCatalog:
    """The catalog described by an ``iceberg_catalog`` connection's fields (module docstring)."""
    options = _extra_options(conn_id, extra or {})
    uri = options.pop("uri", None) or host or None
    kind = options.pop("kind", None) or _kind_of(uri, options.get("flavor"))
    if kind not in KINDS:
        raise IcebergCatalogConnectionError(
            f"connection {conn_id!r}: extra kind {kind!r} is not one of {list(KINDS)}"
        )
    project, location = options.pop("project", None), options.pop("location", None)
    fields: dict[str, Any] = {"name": catalog_name, **options, "kind": kind}
    fields["warehouse"] = options.get("warehouse") or schema or ""
    unused = [name for name, value in (("project", project), ("location", location)) if value]
    try:
        uri = _full_uri(kind, uri, port)
        unused = _connect_fields(fields, kind, uri, login, password, unused)
        if unused:
            raise ValueError(f"{unused} mean nothing to a {kind} catalog: leave them empty")
        if kind == "rest":
            return IcebergCatalog.rest(project=project, location=location, **fields)
        return IcebergCatalog(**fields)
    except ValueError as error:
        raise IcebergCatalogConnectionError(f"connection {conn_id!r}: {error}") from error


def _full_uri(kind: str, uri: str | None, port: int | None) -> str | None:
    """A bare host name as the catalog's URI: ``thrift://host:port`` for a Hive metastore,
    ``https://host[:port]`` for a REST catalog; a REST URI without a port takes the port
    field's (the form's separate Port field would otherwise be dropped); any other URI as
    given. A port field that contradicts the URI's own port is refused."""
    if uri and port and kind == "rest" and "://" in uri:
        return _rest_uri_with_port(uri, port)
    if not uri or "://" in uri or uri.startswith("jdbc:"):
        return uri
    if kind == "hive":
        return f"thrift://{uri}:{port or HIVE_METASTORE_PORT}"
    if kind == "rest":
        return f"https://{uri}" + (f":{port}" if port else "")
    return uri


def _rest_uri_with_port(uri: str, port: int) -> str:
    parts = urlsplit(uri)
    if parts.port is None:
        return urlunsplit(parts._replace(netloc=f"{parts.netloc}:{port}"))
    if parts.port != int(port):
        raise ValueError(
            f"uri {uri!r} names port {parts.port} but the port field is {port}: leave the "
            f"port field empty or make them agree"
        )
    return uri


def _connect_fields(fields: dict, kind: str, uri: str | None, login: str | None,
                    password: str | None, unused: list[str]) -> list[str]:
    """Put the URI and credentials into ``fields`` as ``kind`` takes them; the connection
    fields that mean nothing to it (``unused`` plus login and password where they do not
    apply; a REST catalog takes every field)."""
    if kind == "jdbc":
        fields.update(jdbc_url=uri, jdbc_user=login or None, jdbc_password=password or None)
        return unused
    fields["uri"] = uri
    if kind == "rest":
        if login:
            fields["credential"] = f"{login}:{password or ''}"
        elif password:
            fields.setdefault("token", password)
        return []
    return unused + [name for name, value in (("login", login), ("password", password)) if value]


def _kind_of(uri: str | None, flavor: str | None) -> str:
    if flavor or (uri or "").startswith(("http://", "https://")):
        return "rest"
    if (uri or "").startswith("thrift://"):
        return "hive"
    if (uri or "").startswith("jdbc:"):
        return "jdbc"
    return "hadoop" if not uri else "hive"  # a bare host: a Hive metastore (port 9083)


def _extra_options(conn_id: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The connection's extras as IcebergCatalog fields: empty values dropped (the UI saves
    empty form fields), objects given as JSON text parsed, an unknown key refused."""
    options: dict[str, Any] = {}
    for raw_key, value in extra.items():
        key = raw_key.removeprefix(f"extra__{CONN_TYPE}__")
        if value is None or value == "" or value == {}:
            continue
        if key not in _EXTRA_FIELDS:
            raise IcebergCatalogConnectionError(
                f"connection {conn_id!r}: unknown extra {raw_key!r}; the extras are "
                f"{sorted(_EXTRA_FIELDS)}. Further catalog properties go in "
                f"'properties': {{...}}"
            )
        if key in ("headers", "properties") and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as error:
                raise IcebergCatalogConnectionError(
                    f"connection {conn_id!r}: extra {key!r} is not a JSON object: {error}"
                ) from error
        if key in ("headers", "properties") and not isinstance(value, Mapping):
            raise IcebergCatalogConnectionError(
                f"connection {conn_id!r}: extra {key!r} must be an object of names to values, "
                f"got {type(value).__name__}"
            )
        if key in ("packages", "extra_jars") and isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        if key == "vended_credentials" and isinstance(value, str):
            value = value.strip().lower() in ("1", "true", "yes", "on")
        if key == "flavor" and value not in REST_FLAVORS:
            raise IcebergCatalogConnectionError(
                f"connection {conn_id!r}: extra flavor {value!r} is not one of "
                f"{sorted(REST_FLAVORS)} (leave it out for any other REST catalog)"
            )
        options[key] = value
    return options


UI_RELABELING = {
    "host": "Catalog URI",
    "schema": "Warehouse",
    "login": "Client ID / user",
    "password": "Client secret, token or password",
}
UI_PLACEHOLDERS = {
    "host": "https://biglake.googleapis.com/iceberg/v1/restcatalog, thrift://metastore:9083 "
    "or jdbc:postgresql://host/db",
    "schema": "gs://bucket, or the catalog's name in Polaris / Lakekeeper",
    "login": "OAuth2 client id (REST) or database user (JDBC)",
    "password": "OAuth2 client secret, bearer token (no login), or database password",
}
