"""airflow_cdc.spark_jobs.sources.read_frame.kept and checkpoints.release_checkpoint: a round's read frame
computed once, freed after."""

from __future__ import annotations

from airflow_cdc.spark_jobs.sources.read_frame import kept
from airflow_cdc.spark_jobs.checkpoints import release_checkpoint as release


def _reads(spark, counter):
    """A frame whose every partition counts, in ``counter``, each time it is computed."""

    def read(batches):
        for batch in batches:
            counter.add(1)
            yield batch

    return spark.range(0, 30, numPartitions=3).mapInArrow(read, "id long")


def test_a_kept_frame_is_computed_once_for_every_later_pass(spark):
    computed = spark.sparkContext.accumulator(0)
    frame = kept(_reads(spark, computed))
    first = computed.value

    assert frame.count() == 30 and frame.where("id % 2 = 0").count() == 15
    assert first == 3 and computed.value == 3
    release(frame)


def test_releasing_a_kept_frame_frees_its_blocks(spark):
    frame = kept(_reads(spark, spark.sparkContext.accumulator(0)))
    rdd = frame._jdf.queryExecution().logical().rdd()
    held = set(spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray())
    assert rdd.id() in held

    release(frame)

    assert rdd.id() not in set(spark.sparkContext._jsc.getPersistentRDDs().keySet().toArray())
