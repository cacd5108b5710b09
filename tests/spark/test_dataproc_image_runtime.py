"""The Dataproc job spec names the Iceberg runtime of the image's Spark: Compute Engine images
2.2 and 2.3 run Spark 3.5 on Scala 2.12, image 3.0 Spark 4.0 on 2.13, Serverless 1.2 Spark
3.5 on 2.12 and Serverless 2.2 the same Spark on 2.13."""

from __future__ import annotations

import pytest

from airflow_cdc.spark.dataproc import DataprocCluster, DataprocServerless, image_spark, with_image_runtime
from airflow_cdc.spark.environment import ICEBERG_VERSION
from airflow_cdc.spark.iceberg import IcebergCatalog
from airflow_cdc.spark.job import SparkJobSpec, iceberg_job_spec


def runtime(spark_scala: str) -> str:
    return f"org.apache.iceberg:iceberg-spark-runtime-{spark_scala}:{ICEBERG_VERSION}"


@pytest.mark.parametrize(("version", "serverless", "expected"), [
    ("2.2-debian12", False, runtime("3.5_2.12")),
    ("2.3.10-ubuntu22", False, runtime("3.5_2.12")),
    ("3.0", False, runtime("4.0_2.13")),
    ("1.2", True, runtime("3.5_2.12")),
    ("2.2", True, runtime("3.5_2.13")),
    ("3.0", True, runtime("4.0_2.13")),
])
def test_a_job_spec_for_an_image_names_the_runtime_of_the_images_spark(version, serverless, expected):
    catalog = IcebergCatalog(warehouse="gs://bucket/lake", spark_version="3.5")
    spec = iceberg_job_spec("apply_job", catalog, [], name="apply")

    packages = with_image_runtime(spec, image_spark(version, serverless=serverless)).packages

    assert packages[0] == expected
    assert [p for p in packages if "iceberg-spark-runtime" in p] == [expected]


def test_the_local_sparks_runtime_jar_becomes_the_images_coordinate_and_other_jars_stay():
    spec = SparkJobSpec(application="apply_job.py", jars=(
        f"/jars/iceberg-spark-runtime-4.1_2.13-{ICEBERG_VERSION}.jar", "/usr/share/java/postgresql.jar"))

    for_image = with_image_runtime(spec, image_spark("2.2"))

    assert for_image.jars == ("/usr/share/java/postgresql.jar",)
    assert for_image.packages == (runtime("3.5_2.12"),)


def test_without_an_image_version_the_catalogs_runtime_is_kept():
    spec = iceberg_job_spec("apply_job", IcebergCatalog(warehouse="gs://bucket/lake", spark_version="4.1"),
                            [], name="apply")

    assert with_image_runtime(spec, image_spark(None)) == spec


def test_the_runners_of_a_dag_take_the_spark_of_their_image():
    cluster = DataprocCluster(cluster_name="cdc", region="europe-west1", image_version="3.0-debian12")
    serverless = DataprocServerless(region="europe-west1", runtime_version="2.2")

    assert cluster.runner(None, "project", "gs://bucket/work").image_spark == ("4.0", "2.13")
    assert serverless.runner(None, "project", "gs://bucket/work").image_spark == ("3.5", "2.13")


def test_an_image_whose_spark_has_no_iceberg_runtime_is_refused_naming_its_spark():
    with pytest.raises(ValueError, match=r"Dataproc image '2.1' runs Spark 3.3, for which Iceberg .* no runtime"):
        DataprocCluster(cluster_name="cdc", region="europe-west1", image_version="2.1")


def test_an_unknown_runtime_version_is_refused_naming_the_known_ones_and_the_fix():
    with pytest.raises(ValueError, match=r"Serverless runtime '9.1' is not one whose Spark is known .*packages="):
        DataprocServerless(region="europe-west1", runtime_version="9.1")
