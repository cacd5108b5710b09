"""The emulator's replication keeps each cluster's commits to a row in commit order.

Seed 004: data change records of one row key and one cluster come in commit-timestamp order;
only records of different rows or different clusters may pass each other. A lag episode holds
one cluster's replication of a row range back; its later commits to the same rows must not
overtake the held ones on the other cluster's stream.

The reader here is the test's own: the raw ``ReadChangeStream`` responses of the real client,
one call over the episode's partition, no library reader in between.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest

from airflow_cdc_emulators.bigtable import BigtableEmulator, generate_history

START = datetime(2025, 1, 6, 8, 0, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def history():
    # Dense enough that the held-back cluster writes the same rows during and after the hold.
    return generate_history(seed=7, start=START, hours=1.0, commits_per_second=2.0)


def read_in_stream_order(client, history, row_range, start, end):
    """(row key, source cluster, commit timestamp) of every data change, as delivered."""
    request = {
        "table_name": history.table_name, "app_profile_id": "default",
        "partition": {"row_range": {"start_key_closed": row_range.start,
                                    "end_key_open": row_range.end}},
        "start_time": start, "end_time": end,
        "heartbeat_duration": timedelta(seconds=1),
    }
    delivered = []
    for response in client.read_change_stream(request=request, timeout=60):
        if "data_change" in response:
            change = response.data_change
            if change.type_.name != "CONTINUATION":
                delivered.append((bytes(change.row_key), change.source_cluster_id,
                                  change.commit_timestamp))
        elif "close_stream" in response:
            assert response.close_stream.status.code == 0, response.close_stream.status.message
    return delivered


def test_a_held_back_clusters_later_commits_to_a_row_never_pass_its_held_ones(history):
    (episode,) = history.lag_episodes
    with BigtableEmulator(history, now=history.end) as emulator:
        delivered = read_in_stream_order(
            emulator.client(), history, episode.row_range,
            episode.start - timedelta(minutes=1), episode.hold_until + timedelta(seconds=10))

    per_row_and_cluster = defaultdict(list)
    for row_key, cluster, commit_timestamp in delivered:
        per_row_and_cluster[(row_key, cluster)].append(commit_timestamp)
    held_cluster_rows = [times for (_, cluster), times in per_row_and_cluster.items()
                         if cluster == episode.cluster and len(times) > 1]
    assert held_cluster_rows, "the held-back cluster wrote no row twice in the read"
    out_of_order = {key: times for key, times in per_row_and_cluster.items()
                    if times != sorted(times)}
    assert out_of_order == {}
