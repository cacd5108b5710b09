"""airflow-cdc: change data capture as batch Spark pipelines, run by Apache Airflow.

Spanner change streams, Datastream, Debezium, Spanner commit timestamps and Bigtable change
streams land in Apache Iceberg tables, one Airflow data interval per window, exactly once.
This module stays import-light: Spark executors import ``airflow_cdc`` without Airflow.
"""

from __future__ import annotations

__version__ = "0.1.0"


def get_provider_info() -> dict:
    """Provider metadata read by Airflow's ProvidersManager (entry point apache_airflow_provider)."""
    return {
        "package-name": "airflow-cdc",
        "name": "Change Data Capture (airflow-cdc)",
        "description": "Change data capture from Spanner, Bigtable, Datastream and Debezium "
        "into Apache Iceberg tables as incremental Spark batches, one window per data interval.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "airflow-cdc",
                "external-doc-url": "https://pypi.org/project/airflow-cdc/",
                "tags": ["software"],
            }
        ],
        "hooks": [{"integration-name": "airflow-cdc", "python-modules": _modules("hooks")}],
        "operators": [{"integration-name": "airflow-cdc", "python-modules": _modules("operators")}],
        "sensors": [{"integration-name": "airflow-cdc", "python-modules": _modules("sensors")}],
        "triggers": [{"integration-name": "airflow-cdc", "python-modules": _modules("triggers")}],
        "connection-types": [
            {
                "hook-class-name": "airflow_cdc.hooks.state.CdcStateHook",
                "connection-type": "cdc_state",
                "hook-name": "airflow-cdc state store",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {"schema": "Database"},
                    "placeholders": {
                        "host": "empty for the embedded SQLite store",
                        "schema": "cdc_state",
                        "port": "5432",
                    },
                },
                "conn-fields": {
                    "url": {
                        "label": "SQLAlchemy URL",
                        "description": "Full URL; overrides host, port, login and database.",
                        "schema": {"type": ["string", "null"], "format": "password"},
                    },
                    "path": {
                        "label": "SQLite file",
                        "description": "Used when host is empty; default cdc_state.db in AIRFLOW_HOME.",
                        "schema": {"type": ["string", "null"]},
                    },
                },
            },
            {
                "hook-class-name": "airflow_cdc.hooks.iceberg_catalog.IcebergCatalogHook",
                "connection-type": "iceberg_catalog",
                "hook-name": "Iceberg catalog (airflow-cdc)",
                "ui-field-behaviour": {
                    "hidden-fields": [],
                    "relabeling": {
                        "host": "Catalog URI",
                        "schema": "Warehouse",
                        "login": "Client ID / user",
                        "password": "Client secret, token or password",
                    },
                    "placeholders": {
                        "host": "https://biglake.googleapis.com/iceberg/v1/restcatalog, "
                        "thrift://metastore:9083 or jdbc:postgresql://host/db",
                        "schema": "gs://bucket, or the catalog's name in Polaris / Lakekeeper",
                        "login": "OAuth2 client id (REST) or database user (JDBC)",
                        "password": "OAuth2 client secret, bearer token (no login), or "
                        "database password",
                    },
                },
                "conn-fields": _ICEBERG_CATALOG_FIELDS,
            },
        ],
    }


# The iceberg_catalog connection form's extras (airflow_cdc.hooks.iceberg_catalog reads them).
_ICEBERG_CATALOG_FIELDS = {
    "kind": {
        "label": "Catalog kind",
        "description": "hadoop, jdbc, rest or hive; by default rest with a flavor, else read "
        "from the URI.",
        "schema": {"type": ["string", "null"], "enum": ["hadoop", "jdbc", "rest", "hive", None]},
    },
    "flavor": {
        "label": "REST catalog flavor",
        "description": "biglake, polaris or lakekeeper: fills in what the server documents.",
        "schema": {"type": ["string", "null"], "enum": ["biglake", "lakekeeper", "polaris", None]},
    },
    "project": {
        "label": "BigLake billing project",
        "description": "Sent as header x-goog-user-project (BigLake only).",
        "schema": {"type": ["string", "null"]},
    },
    "location": {
        "label": "BigLake location",
        "description": "Uses the regional endpoint https://biglake.<location>.rep.googleapis.com.",
        "schema": {"type": ["string", "null"]},
    },
    "io_impl": {
        "label": "FileIO class",
        "description": "e.g. org.apache.iceberg.gcp.gcs.GCSFileIO or "
        "org.apache.iceberg.aws.s3.S3FileIO.",
        "schema": {"type": ["string", "null"]},
    },
    "scope": {
        "label": "OAuth2 scope",
        "description": "e.g. PRINCIPAL_ROLE:ALL (Polaris) or lakekeeper.",
        "schema": {"type": ["string", "null"]},
    },
    "oauth2_server_uri": {
        "label": "OAuth2 token endpoint",
        "description": "The identity provider's token endpoint (Lakekeeper: e.g. Keycloak's).",
        "schema": {"type": ["string", "null"]},
    },
    "vended_credentials": {
        "label": "Vended credentials",
        "description": "Ask the catalog for short-lived storage credentials "
        "(header X-Iceberg-Access-Delegation).",
        "schema": {"type": ["boolean", "null"]},
    },
    "headers": {
        "label": "HTTP headers",
        "description": "JSON object of further headers; one named like a secret is kept off "
        "command lines.",
        "schema": {"type": ["string", "null"], "format": "password"},
    },
    "spark_version": {
        "label": "Spark version of the cluster",
        "description": "e.g. 3.5: Spark resolves the Iceberg runtime for it from Maven.",
        "schema": {"type": ["string", "null"]},
    },
    "packages": {
        "label": "Maven packages",
        "description": "Comma-separated coordinates replacing the Iceberg runtime's.",
        "schema": {"type": ["string", "null"]},
    },
    "storage_emulator_host": {
        "label": "GCS emulator",
        "description": "e.g. http://127.0.0.1:4443: a gs:// warehouse on a local emulator, "
        "reached without credentials (local development only).",
        "schema": {"type": ["string", "null"]},
    },
}


def _modules(layer: str) -> list[str]:
    """The public modules of one Airflow-side layer, listed from the package itself."""
    from pathlib import Path

    folder = Path(__file__).parent / layer
    return sorted(
        f"airflow_cdc.{layer}.{path.stem}"
        for path in folder.glob("*.py")
        if not path.name.startswith("_")
    )
