"""Faults on demand, mid-stream: what a change stream service does on a bad day.

Every emulator with a change stream has one :class:`Faults` object, ``emulator.faults``
(not to be confused with :mod:`airflow_cdc.faults`, the crash points that kill a process). A
test (or anyone trying a pipeline) injects faults into the running server; the servicer asks
it at the start of each call and before each record it sends, so a fault lands exactly where
it was asked for, whichever client or Spark executor makes the call::

    emulator.faults.inject("UNAVAILABLE", after_records=300)    # the next read, mid-stream
    emulator.faults.inject("DEADLINE_EXCEEDED", on_call=2)      # the 2nd read from now, at once
    emulator.faults.inject("RESOURCE_EXHAUSTED", retry_delay=0.5, times=2)
    emulator.faults.reject_token(partition)                     # the service no longer accepts it
    emulator.faults.stop_heartbeats(partition, after=instant)   # the partition goes quiet
    emulator.faults.fired                                       # what fired, in order
    emulator.faults.clear()                                     # no faults, nothing fired

* **Status faults** (:meth:`Faults.inject`): the ``on_call``-th matching call from now (and
  the ``times - 1`` matching calls after it) sends ``after_records`` records, then ends with
  the gRPC status ``code``: UNAVAILABLE, DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED, the last
  with a ``google.rpc.RetryInfo`` of ``retry_delay`` in the status details, as Google APIs
  send it. A stream shorter than ``after_records`` gets the status after its last record.
* **Rejected tokens** (:meth:`Faults.reject_token`) and **stopped heartbeats**
  (:meth:`Faults.stop_heartbeats`) are the emulator's own: each emulator's servicer answers
  them with its service's status code and message (see its README).

A matching call is one of ``method`` (default: the change stream read) that reads
``partition`` (default: any). No Airflow or pyspark import here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import grpc

STATUS_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED")
_MESSAGES = {
    "UNAVAILABLE": "The service is currently unavailable (injected fault: a server restart or "
                   "a lost connection).",
    "DEADLINE_EXCEEDED": "Deadline exceeded while the server was streaming results (injected "
                         "fault).",
    "RESOURCE_EXHAUSTED": "Quota exceeded: too many concurrent change stream reads for this "
                          "database; retry after the delay in the RetryInfo (injected fault).",
}


@dataclass
class StatusFault:
    code: str
    method: str
    after_records: int
    on_call: int
    times: int
    retry_delay: float | None
    partition: Hashable | None
    message: str
    calls: int = 0  # matching calls seen since the fault was injected
    fired: int = 0


@dataclass
class TokenRejection:
    partition: Hashable | None
    method: str
    times: int | None  # None: for good, as an expired token stays expired
    fired: int = 0


@dataclass
class HeartbeatStop:
    partition: Hashable
    after: datetime
    method: str


@dataclass(frozen=True)
class Fired:
    """One fault that fired: what, on which call and partition, after how many records."""

    fault: str  # a status code name, "token rejected" or "heartbeats stopped"
    method: str
    partition: str | None
    call: int  # the matching call's number since the fault was injected (1 = the first)
    records_sent: int
    monotonic: float  # time.monotonic() when it fired
    retry_delay: float | None = None


@dataclass
class CallFaults:
    """The faults one call carries, decided when it starts (:meth:`Faults.begin`)."""

    faults: Faults
    method: str
    partition: str | None
    status: list[StatusFault] = field(default_factory=list)
    rejection: TokenRejection | None = None
    heartbeat_stop: HeartbeatStop | None = None
    call_numbers: dict = field(default_factory=dict)
    sent: int = 0

    def due(self, sent: int) -> StatusFault | None:
        """The status fault that fires once ``sent`` records went out, if any."""
        due = [f for f in self.status if sent >= f.after_records]
        return min(due, key=lambda f: f.after_records) if due else None

    def next_due(self) -> int | None:
        """How many records this call sends before a status fault fires (None: none will)."""
        return min((f.after_records for f in self.status), default=None)

    def abort(self, context, fault: StatusFault, sent: int) -> None:
        """End the call with ``fault``'s status (raises, as ``context.abort`` does)."""
        self.faults._record(Fired(fault.code, self.method, self.partition,
                                  self.call_numbers[id(fault)], sent, time.monotonic(),
                                  fault.retry_delay))
        code = grpc.StatusCode[fault.code]
        if fault.retry_delay is None:
            context.abort(code, fault.message)
        from google.protobuf import any_pb2, duration_pb2
        from google.rpc import code_pb2, error_details_pb2, status_pb2
        from grpc_status import rpc_status

        delay = duration_pb2.Duration()
        delay.FromTimedelta(timedelta(seconds=fault.retry_delay))
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        status = status_pb2.Status(code=getattr(code_pb2, fault.code), message=fault.message,
                                   details=[detail])
        context.abort_with_status(rpc_status.to_status(status))

    def check(self, context, sent: int) -> None:
        """Before record ``sent`` + 1 (or the end of the stream): fire a status fault due."""
        fault = self.due(sent)
        if fault is not None:
            self.abort(context, fault, sent)

    def rejected(self, sent: int = 0) -> None:
        self.faults._record(Fired("token rejected", self.method, self.partition,
                                  self.rejection.fired, sent, time.monotonic()))

    def quiet(self, sent: int) -> None:
        self.faults._record(Fired("heartbeats stopped", self.method, self.partition, 0, sent,
                                  time.monotonic()))


class Faults:
    """The faults injected into one emulator (thread-safe: calls arrive from many executors).

    ``methods`` are the RPCs a fault may name, the first being the default (the change stream
    read); ``describe`` turns a partition as a test names it into text for :attr:`fired`.
    """

    def __init__(self, methods: tuple[str, ...], describe: Callable[[Hashable], str] = str):
        self.methods = methods
        self._describe = describe
        self._lock = threading.Lock()
        self._status: list[StatusFault] = []
        self._rejections: list[TokenRejection] = []
        self._stops: list[HeartbeatStop] = []
        self._fired: list[Fired] = []

    # -- injecting ----------------------------------------------------------------------------
    def inject(
        self,
        code: str,
        *,
        after_records: int = 0,
        on_call: int = 1,
        times: int = 1,
        retry_delay: float | timedelta | None = None,
        partition: Hashable | None = None,
        method: str | None = None,
        message: str | None = None,
    ) -> StatusFault:
        """End a matching call with gRPC status ``code`` after ``after_records`` records: the
        ``on_call``-th matching call from now and the ``times - 1`` after it."""
        if code not in STATUS_CODES:
            raise ValueError(f"fault code {code!r} is not one the emulators inject: use one of "
                             f"{list(STATUS_CODES)}")
        if after_records < 0 or on_call < 1 or times < 1:
            raise ValueError(
                f"after_records ({after_records}) must be >= 0, on_call ({on_call}) and times "
                f"({times}) >= 1")
        if isinstance(retry_delay, timedelta):
            retry_delay = retry_delay.total_seconds()
        if retry_delay is not None and code != "RESOURCE_EXHAUSTED":
            raise ValueError(f"retry_delay goes with RESOURCE_EXHAUSTED, not {code}")
        if code == "RESOURCE_EXHAUSTED" and retry_delay is None:
            retry_delay = 1.0
        fault = StatusFault(code, self._method(method), int(after_records), int(on_call),
                            int(times), retry_delay, partition, message or _MESSAGES[code])
        with self._lock:
            self._status.append(fault)
        return fault

    def reject_token(self, partition: Hashable | None = None, *, times: int | None = None,
                     method: str | None = None) -> TokenRejection:
        """Refuse every read of ``partition`` (None: any) as the service refuses a position it
        no longer accepts, ``times`` times (None: until :meth:`clear`)."""
        rejection = TokenRejection(partition, self._method(method), times)
        with self._lock:
            self._rejections.append(rejection)
        return rejection

    def stop_heartbeats(self, partition: Hashable, *, after: datetime,
                        method: str | None = None) -> HeartbeatStop:
        """``partition`` reports no progress beyond ``after``: no heartbeat, record or end."""
        stop = HeartbeatStop(partition, after, self._method(method))
        with self._lock:
            self._stops.append(stop)
        return stop

    def clear(self) -> None:
        """Remove every fault and forget what fired."""
        with self._lock:
            self._status.clear()
            self._rejections.clear()
            self._stops.clear()
            self._fired.clear()

    @property
    def fired(self) -> list[Fired]:
        with self._lock:
            return list(self._fired)

    # -- servicer side ------------------------------------------------------------------------
    def begin(self, method: str, partition: Hashable | None,
              matches: Callable[[Hashable, Hashable | None], bool] = None) -> CallFaults:
        """The faults of a call of ``method`` reading ``partition``, counted as one call."""
        matches = matches or (lambda wanted, read: wanted == read)

        def hit(wanted) -> bool:
            return wanted is None or (partition is not None and matches(wanted, partition))

        call = CallFaults(self, method, None if partition is None else self._describe(partition))
        with self._lock:
            for fault in self._status:
                if fault.method != method or not hit(fault.partition):
                    continue
                fault.calls += 1
                if fault.calls >= fault.on_call and fault.fired < fault.times:
                    fault.fired += 1
                    call.status.append(fault)
                    call.call_numbers[id(fault)] = fault.calls
            for rejection in self._rejections:
                if rejection.method == method and hit(rejection.partition) and (
                        rejection.times is None or rejection.fired < rejection.times):
                    rejection.fired += 1
                    call.rejection = rejection
                    break
            for stop in self._stops:
                if stop.method == method and hit(stop.partition):
                    call.heartbeat_stop = stop
                    break
        return call

    def _record(self, fired: Fired) -> None:
        with self._lock:
            self._fired.append(fired)

    def _method(self, method: str | None) -> str:
        if method is None:
            return self.methods[0]
        if method not in self.methods:
            raise ValueError(f"method {method!r} takes no faults: use one of {list(self.methods)}")
        return method
