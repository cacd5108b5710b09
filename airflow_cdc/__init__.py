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
            }
        ],
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
