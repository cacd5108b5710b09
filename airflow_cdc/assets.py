"""What a pipeline reads and writes, named for Airflow Assets and for OpenLineage.

Iceberg tables are named by location, the way OpenLineage names object-store datasets and
the way the OpenLineage Spark listener reports Iceberg tables: a local warehouse gives
namespace ``file`` and name ``/warehouse/<namespace>/<table>``; ``gs://bucket/wh`` gives
namespace ``gs://bucket`` and name ``wh/<namespace>/<table>``. So the lineage the operators
report joins the lineage Spark itself emits for the same run.

A table's Airflow Asset is named ``<catalog>.<namespace>.<table>`` with the URI
``x-iceberg://<catalog>/<namespace>/<table>``: the catalog, not the warehouse path, identifies
it, so every process (DAG processor, workers, other deployments) derives the same Asset
whatever its local warehouse setting (Airflow deactivates two Assets that share a name but
not a URI). Consumers build it with :func:`iceberg_asset`.

The scheme carries Airflow's ``x-`` prefix, the mark of a scheme no provider defines: Airflow
then takes the URI as it is. For any other scheme it looks for a provider's normaliser, and
the first lookup in a process imports every installed provider's URI handlers (the Google
provider's pulls in the GCS client and gRPC). Each task process parses its DAG file, so that
lookup would cost every task of every pipeline DAG that import, for an answer that is always
"none" (see ``docs/performance.md``). OpenLineage classes are imported only inside the functions that
build facets: parsing a DAG never imports the OpenLineage client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from airflow_cdc.model import validate_identifier
from airflow_cdc.spark.iceberg import IcebergCatalog

ASSET_GROUP = "iceberg"
ASSET_SCHEME = "x-iceberg"


def split_table(table: str, default_namespace: str) -> tuple[str, str]:
    """``ns.name`` or ``name`` (in ``default_namespace``) -> (namespace, name), validated."""
    namespace, _, name = table.rpartition(".")
    namespace = namespace or default_namespace
    if "." in namespace:  # catalog.namespace.name: the catalog part is ours, not the user's
        namespace = namespace.rpartition(".")[2]
    return validate_identifier("Iceberg namespace", namespace), validate_identifier(
        "Iceberg table name", name
    )


def iceberg_location(catalog: IcebergCatalog, namespace: str, name: str) -> str:
    """The table's default location: ``<warehouse>/<namespace>/<name>`` (Hadoop and JDBC)."""
    return f"{catalog.warehouse_uri.rstrip('/')}/{namespace}/{name}"


def openlineage_name(location: str) -> tuple[str, str]:
    """(namespace, name) of a location by OpenLineage's naming of file and object datasets."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return "file", parts.path
    return f"{parts.scheme}://{parts.netloc}", parts.path.lstrip("/")


def iceberg_asset(table: str, catalog: IcebergCatalog | None = None, namespace: str = "current"):
    """The Airflow Asset of one Iceberg table (``ns.name`` or ``name`` in ``namespace``)."""
    from airflow.sdk import Asset

    catalog = catalog or IcebergCatalog()
    ns, name = split_table(table, namespace)
    return Asset(
        name=f"{catalog.name}.{ns}.{name}",
        uri=f"{ASSET_SCHEME}://{catalog.name}/{ns}/{name}",
        group=ASSET_GROUP,
    )


def target_tables(
    targets: Mapping | None, source_tables: Sequence[str] | None
) -> list[tuple[str, str]]:
    """(namespace, name) of the targets the apply job writes for the given source tables.

    The apply job's rule: a ``mapping`` entry names the target (``name`` in the targets'
    namespace, or ``ns.name``); an unmapped source table keeps its own name.
    """
    targets = dict(targets or {})
    default_ns = targets.get("namespace", "current")
    mapping = dict(targets.get("mapping") or {})
    names = [mapping.get(table, table) for table in (source_tables or ())]
    names += [value for key, value in mapping.items() if key not in (source_tables or ())]
    found: list[tuple[str, str]] = []
    for name in names:
        pair = split_table(name, default_ns)
        if pair not in found:
            found.append(pair)
    return found


def pipeline_assets(
    *,
    catalog: IcebergCatalog | None,
    changelog_table: str,
    targets: Mapping | None,
    source_tables: Sequence[str] | None,
) -> list:
    """The Assets a pipeline's gate updates: its changelog and every known target table."""
    catalog = catalog or IcebergCatalog()
    tables = [split_table(changelog_table, "cdc")] + target_tables(targets, source_tables)
    return [iceberg_asset(f"{ns}.{name}", catalog) for ns, name in tables]


# --- OpenLineage -------------------------------------------------------------------------------
def iceberg_datasets(catalog: IcebergCatalog, tables: Iterable[str], namespace: str = "current"):
    """OpenLineage Datasets of Iceberg tables (``ns.name``, ``name``, or ``catalog.ns.name``)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    datasets = []
    for table in tables:
        ns, name = split_table(table, namespace)
        ol_namespace, ol_name = openlineage_name(iceberg_location(catalog, ns, name))
        datasets.append(Dataset(namespace=ol_namespace, name=ol_name))
    return datasets


def source_datasets(inputs):
    """OpenLineage Datasets of what a source reads: ``(namespace, name)`` pairs as the source
    names them (:meth:`~airflow_cdc.sources.base.ChangeSource.lineage_inputs`)."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    return [Dataset(namespace=namespace, name=name) for namespace, name in inputs]


def operator_lineage(inputs: list, outputs: list):
    """An OperatorLineage, or None when the OpenLineage provider is not installed."""
    try:
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    return OperatorLineage(inputs=inputs, outputs=outputs)


def inject_parent_job(spark_conf: Mapping[str, str], context) -> dict:
    """Spark properties plus the OpenLineage parent-job properties the Spark provider injects.

    The Spark provider's SparkSubmitOperator does this when ``[openlineage]
    spark_inject_parent_job_info`` is on; our Spark steps do it always, since their jobs are
    the children of the Airflow task. Properties already set by the user win. Transport
    information is not injected: it may carry an API key, and job properties appear in
    process listings.
    """
    import logging

    log = logging.getLogger(__name__)
    try:
        from airflow.providers.common.compat.openlineage.utils.spark import (
            inject_parent_job_information_into_spark_properties,
        )
    except ImportError:
        return dict(spark_conf)
    try:
        conf = inject_parent_job_information_into_spark_properties(dict(spark_conf), context)
    except Exception as error:  # lineage must never fail a data step
        log.warning("Spark job runs without OpenLineage parent job properties: %s", error)
        return dict(spark_conf)
    return conf
