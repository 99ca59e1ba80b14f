"""Stream capture: build a :class:`~oxiwork.graph.ComputeGraph` by recording stream work.

CUDA offers two ways to make a graph: explicit construction (``cudaGraphAdd*Node``, here
:class:`~oxiwork.builder.GraphBuilder`) and **stream capture**: ``cudaStreamBeginCapture``
on an origin stream, ordinary launches, copies and event record/wait calls, then
``cudaStreamEndCapture`` returns the graph they would have run. :func:`capture` models the
second, in the style of ``torch.cuda.graph``, and produces exactly the dependencies real
capture creates:

- each op on a capturing stream depends on the stream's *dependency set* (at first empty on
  the origin stream; afterwards the stream's previous op): stream order becomes edges;
- ``record(event)`` on a capturing stream snapshots that stream's dependency set;
  ``wait(event)`` on another stream adds the snapshot to the waiter's set. A stream that is
  not capturing joins the capture by waiting on a captured event (a *fork*);
- event records and waits make no nodes: they only carry dependencies, as in CUDA.

Only stream order and events create dependencies; buffers do not. So two streams that
touch one buffer without an event between them are unordered in the captured graph, which
on a real GPU is a silent race. oxiwork is never silently wrong: :meth:`Capture.end`
checks the graph with :func:`~oxiwork.verify.verify` and raises :class:`CaptureRace`.
The errors real capture raises are raised here with the driver's name for them:

============================  ===========================================================
error                         when
============================  ===========================================================
:class:`StreamNotCapturing`   work on a stream that never joined the capture (on a GPU it
                              would run eagerly, outside the graph)
:class:`CaptureIsolation`     a wait on an event recorded outside the capture
                              (``cudaErrorStreamCaptureIsolation``)
:class:`CaptureUnjoined`      the capture ends with forked work not joined back into the
                              origin stream (``cudaErrorStreamCaptureUnjoined``)
:class:`CaptureUnsupported`   a synchronising call during capture
                              (``cudaErrorStreamCaptureUnsupported``)
:class:`CaptureInvalidated`   any call after one of the above
                              (``cudaErrorStreamCaptureInvalidated``)
:class:`BakedHostValue`       a kernel parameter given as a host object whose later
                              changes would never reach the graph
:class:`EventNeverRecorded`   a wait on an event nobody recorded (a GPU makes it a no-op)
:class:`CaptureRace`          two accesses of one buffer, one a write, that no stream order
                              or event orders
============================  ===========================================================

Reference: NVIDIA, *CUDA C++ Programming Guide*, "CUDA Graphs: Creating a Graph Using
Stream Capture" (cross-stream dependencies and events; prohibited and unhandled
operations; invalidation).

Example
-------
>>> from oxiwork import MemcpyDir, capture
>>> with capture() as cap:
...     x, y = cap.buffer("x", 4096), cap.buffer("y", 4096)
...     main, side = cap.stream("main"), cap.stream("side")
...     _ = main.memcpy("upload", MemcpyDir.HostToDevice, dst=x)
...     side.wait(main.record("forked"))          # fork: side joins the capture
...     _ = side.launch("relu", 4, 256, inputs=[x], outputs=[y])
...     main.wait(side.record("joined"))          # join back into the origin stream
...     _ = main.memcpy("download", MemcpyDir.DeviceToHost, src=y)
>>> name = lambda nid: cap.graph.node(nid).name
>>> sorted((name(a), name(b)) for a, b in cap.graph.edges)  # stream order, fork, join
[('relu', 'download'), ('upload', 'download'), ('upload', 'relu')]
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oxiwork.builder import GraphBuilder
from oxiwork.error import GraphError, InvalidArgument, UnorderedAccess
from oxiwork.graph import ComputeGraph
from oxiwork.node import BufferId, MemcpyDir, NodeId
from oxiwork.verify import verify

__all__ = [
    "BakedHostValue",
    "Capture",
    "CaptureError",
    "CaptureInvalidated",
    "CaptureIsolation",
    "CaptureRace",
    "CaptureStream",
    "CaptureUnjoined",
    "CaptureUnsupported",
    "Event",
    "EventNeverRecorded",
    "StreamNotCapturing",
    "capture",
]


class CaptureError(GraphError):
    """A stream-capture error; ``cuda_error`` names what a real driver returns (or ``None``
    where a real driver says nothing and the work would silently go wrong)."""

    cuda_error: str | None = None


class StreamNotCapturing(CaptureError):
    """Work on a stream that is not part of the capture."""


class CaptureIsolation(CaptureError):
    """A dependency on work outside the capture."""

    cuda_error = "cudaErrorStreamCaptureIsolation"


class CaptureUnjoined(CaptureError):
    """The capture ended with forked work not joined back into the origin stream."""

    cuda_error = "cudaErrorStreamCaptureUnjoined"


class CaptureUnsupported(CaptureError):
    """An operation that is not permitted while a stream is capturing."""

    cuda_error = "cudaErrorStreamCaptureUnsupported"


class CaptureInvalidated(CaptureError):
    """A call on a capture that an earlier error invalidated."""

    cuda_error = "cudaErrorStreamCaptureInvalidated"


class BakedHostValue(CaptureError):
    """A kernel parameter that is a host object: its value would be frozen into the graph."""


class EventNeverRecorded(CaptureError):
    """A wait on an event that was never recorded."""


class CaptureRace(CaptureError):
    """Two accesses of a buffer that neither stream order nor an event orders."""


@dataclass(eq=False, slots=True)
class Event:
    """An event handle. ``record`` on a stream fills it; ``wait`` reads it."""

    name: str
    recorded: bool = False
    captured: bool = False  # recorded on a capturing stream of this capture
    deps: frozenset[NodeId] = frozenset()
    stream: str | None = None


@dataclass(eq=False)
class CaptureStream:
    """A named stream of a :class:`Capture`. Use its methods to issue work on it."""

    capture: Capture
    name: str
    deps: frozenset[NodeId] | None = None  # None: not capturing
    nodes: list[NodeId] = field(default_factory=list)

    @property
    def capturing(self) -> bool:
        """Whether work issued on this stream is captured (``cudaStreamIsCapturing``)."""
        return self.deps is not None

    def launch(
        self,
        name: str,
        blocks: int,
        threads: int,
        smem: int = 0,
        *,
        inputs: Iterable[BufferId] = (),
        outputs: Iterable[BufferId] = (),
        op: str | None = None,
        fusible: bool = True,
        **params: Any,
    ) -> NodeId:
        """Capture a 1-D kernel launch; ``params`` are its op parameters (``alpha=2.0``).

        A parameter is copied by value when the launch is captured, as a CUDA kernel
        argument is, so it must be a plain number, str or bool.
        """
        cap = self.capture
        cap._check_open()
        self._check_capturing(f"launch {name!r}")
        for key, value in params.items():
            _check_bakeable(cap, name, key, value)
        kb = cap.builder.add_kernel(name, blocks, threads, smem)
        kb.fusible(fusible).inputs(list(inputs)).outputs(list(outputs)).params(**params)
        if op is not None:
            kb.op(op)
        return cap._issue(self, kb.finish)

    def memcpy(
        self,
        name: str,
        direction: MemcpyDir,
        size_bytes: int | None = None,
        *,
        src: BufferId | None = None,
        dst: BufferId | None = None,
    ) -> NodeId:
        """Capture a copy; ``size_bytes`` defaults to the size of its device buffer."""
        cap = self.capture
        cap._check_open()
        self._check_capturing(f"memcpy {name!r}")
        if size_bytes is None:
            device = dst if dst is not None else src
            if device is None:
                raise cap._fail(
                    InvalidArgument(f"memcpy {name!r}: name its device buffer (src= or dst=)")
                )
            size_bytes = cap._size(device, name)
        return cap._issue(
            self, lambda: cap.builder.add_memcpy(name, direction, size_bytes, src=src, dst=dst)
        )

    def memset(self, name: str, dst: BufferId, value: int = 0) -> NodeId:
        """Capture a byte fill of the whole buffer ``dst``."""
        cap = self.capture
        cap._check_open()
        self._check_capturing(f"memset {name!r}")
        size = cap._size(dst, name)
        return cap._issue(self, lambda: cap.builder.add_memset(name, size, value, dst=dst))

    def host_callback(self, label: str, fn: Any = None) -> NodeId:
        """Capture a host function (``cudaLaunchHostFunc`` is capturable)."""
        cap = self.capture
        cap._check_open()
        self._check_capturing(f"host callback {label!r}")
        return cap._issue(self, lambda: cap.builder.add_host_callback(label, fn))

    def record(self, event: Event | str | None = None) -> Event:
        """Record ``event`` (a new one if a name or nothing is given) on this stream."""
        cap = self.capture
        cap._check_open()
        ev = event if isinstance(event, Event) else cap.event(event)
        ev.recorded = True
        ev.stream = self.name
        # Recording on a stream outside the capture is legal: it records eager work,
        # which a capturing stream may then not wait on (isolation).
        ev.captured = self.capturing
        ev.deps = self.deps if self.deps is not None else frozenset()
        return ev

    def wait(self, event: Event) -> None:
        """Make this stream's next op wait for ``event``; a stream outside the capture
        joins it by waiting on a captured event (a fork)."""
        cap = self.capture
        cap._check_open()
        if not isinstance(event, Event):
            raise cap._fail(InvalidArgument(f"stream {self.name!r}: wait() takes an Event"))
        if not event.recorded:
            raise cap._fail(
                EventNeverRecorded(
                    f"stream {self.name!r} waits on event {event.name!r}, which was never "
                    "recorded: a GPU treats that wait as already complete, so it orders "
                    "nothing; record the event on the producing stream first"
                )
            )
        if not event.captured:
            if self.capturing:
                raise cap._fail(
                    CaptureIsolation(
                        f"stream {self.name!r} waits on event {event.name!r}, recorded on "
                        f"stream {event.stream!r} outside the capture: a dependency would "
                        "cross the capture boundary (cudaErrorStreamCaptureIsolation). "
                        "Record the event on a capturing stream, or synchronise before "
                        "the capture begins"
                    )
                )
            return  # eager wait on eager work: nothing to capture
        self.deps = event.deps | (self.deps or frozenset())

    def synchronize(self) -> None:
        """``cudaStreamSynchronize``: not permitted while a capture is under way."""
        cap = self.capture
        cap._check_open()
        raise cap._fail(
            CaptureUnsupported(
                f"synchronizing stream {self.name!r} while capturing is not permitted "
                "(cudaErrorStreamCaptureUnsupported): a graph cannot wait for the host. "
                "End the capture first, or order the work with events"
            )
        )

    def _check_capturing(self, what: str) -> None:
        if not self.capturing:
            origin = self.capture.origin
            raise self.capture._fail(
                StreamNotCapturing(
                    f"{what} on stream {self.name!r}, which is not capturing: on a GPU it "
                    "would run eagerly, now, and never be part of the graph. Fork the "
                    f"stream into the capture first: {self.name}.wait({origin}.record())"
                )
            )


class Capture:
    """A stream capture under way, then ended (see :func:`capture`).

    Use it as a context manager; the graph is :attr:`graph` after the ``with`` block.
    ``stream_of`` maps each captured node to the stream it was issued on (a CUDA graph
    keeps no streams: the plan assigns them anew).
    """

    def __init__(self, origin: str = "main") -> None:
        self.builder = GraphBuilder()
        self.origin = origin
        self.streams: dict[str, CaptureStream] = {}
        self.stream_of: dict[NodeId, str] = {}
        self._events = 0
        self._edges: dict[tuple[NodeId, NodeId], None] = {}
        self._state = "capturing"
        self._why: str | None = None
        self._graph: ComputeGraph | None = None
        self._sizes: dict[BufferId, int] = {}
        self.stream(origin).deps = frozenset()  # cudaStreamBeginCapture(origin)

    # ------------------------------------------------------------------ context manager
    def __enter__(self) -> Capture:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if exc is None:
            self.end()
        elif self._state == "capturing":
            self._state = "invalidated"
            self._why = f"{type(exc).__name__}: {exc}"
        return False

    # ------------------------------------------------------------------ handles
    def stream(self, name: str) -> CaptureStream:
        """The stream named ``name`` (created on first use; only the origin captures
        until another stream waits on a captured event)."""
        self._check_open()
        if not isinstance(name, str) or not name:
            raise self._fail(InvalidArgument(f"a stream name must be a non-empty str: {name!r}"))
        if name not in self.streams:
            self.streams[name] = CaptureStream(self, name)
        return self.streams[name]

    def event(self, name: str | None = None) -> Event:
        """A new, unrecorded event."""
        self._check_open()
        self._events += 1
        return Event(name if name is not None else f"event{self._events - 1}")

    def buffer(self, name: str, size_bytes: int, **kwargs: Any) -> BufferId:
        """Allocate a buffer (``GraphBuilder.alloc_buffer``'s arguments)."""
        self._check_open()
        try:
            bid = self.builder.alloc_buffer(name, size_bytes, **kwargs)
        except GraphError as e:
            raise self._fail(e) from None
        self._sizes[bid] = size_bytes
        return bid

    # ------------------------------------------------------------------ end
    def end(self) -> ComputeGraph:
        """``cudaStreamEndCapture`` on the origin stream: check and return the graph."""
        self._check_open()
        origin = self.streams[self.origin]
        joined = self._ancestors(origin.deps or frozenset())
        loose = [n for n in self.stream_of if n not in joined]
        if loose:
            by_stream: dict[str, list[str]] = {}
            for n in loose:
                by_stream.setdefault(self.stream_of[n], []).append(self._name(n))
            where = "; ".join(
                f"stream {s!r}: {', '.join(map(repr, v))}" for s, v in by_stream.items()
            )
            last = next(iter(by_stream))
            raise self._fail(
                CaptureUnjoined(
                    f"the capture ended with work not joined back into the origin stream "
                    f"{self.origin!r} (cudaErrorStreamCaptureUnjoined): {where}. Record an "
                    f"event after the last op of stream {last!r} and wait on it on "
                    f"{self.origin!r} before the capture ends"
                )
            )
        built = self.builder.build()
        # build() infers data edges from buffers; capture creates none, so keep only
        # the stream-order and event edges recorded here.
        graph = ComputeGraph(built.nodes, built.buffers, tuple(self._edges))
        try:
            verify(graph)
        except UnorderedAccess as e:
            a, b = e.first_name, e.second_name
            sa, sb = self.stream_of[NodeId(e.first)], self.stream_of[NodeId(e.second)]
            done = {"read": "read", "write": "written"}
            raise self._fail(
                CaptureRace(
                    f"buffer {e.buffer!r} is {done[e.first_access]} by {a!r} (stream {sa!r}) "
                    f"and {done[e.second_access]} by {b!r} (stream {sb!r}), and no stream order or "
                    "event orders them: capture makes dependencies from streams and events "
                    "only, never from buffers, so on a GPU they run concurrently (a race no "
                    f"driver reports). Record an event on {sa!r} after {a!r} and wait on "
                    f"it on {sb!r} before {b!r}"
                )
            ) from e
        for s in self.streams.values():
            s.deps = None  # every stream leaves capture mode
        self._state = "ended"
        self._graph = graph
        return graph

    @property
    def graph(self) -> ComputeGraph:
        """The captured graph (after :meth:`end` or the ``with`` block)."""
        if self._graph is None:
            raise CaptureError(
                "the capture has not ended: leave the `with` block or call end() first"
                + (f" (it was invalidated: {self._why})" if self._why else "")
            )
        return self._graph

    # ------------------------------------------------------------------ internals
    def _issue(self, stream: CaptureStream, make: Any) -> NodeId:
        try:
            nid = make()
        except GraphError as e:
            raise self._fail(e) from None
        for d in stream.deps or ():
            self._edges[(d, nid)] = None
        stream.deps = frozenset((nid,))
        stream.nodes.append(nid)
        self.stream_of[nid] = stream.name
        return nid

    def _ancestors(self, tips: Iterable[NodeId]) -> set[NodeId]:
        pred: dict[NodeId, list[NodeId]] = {}
        for a, b in self._edges:
            pred.setdefault(b, []).append(a)
        seen = set(tips)
        todo = list(seen)
        while todo:
            for p in pred.get(todo.pop(), ()):
                if p not in seen:
                    seen.add(p)
                    todo.append(p)
        return seen

    def _size(self, bid: BufferId, user: str) -> int:
        if bid not in self._sizes:
            raise self._fail(
                InvalidArgument(f"{user!r} names buffer {bid!r}, not one of this capture's")
            )
        return self._sizes[bid]

    def _name(self, nid: NodeId) -> str:
        return self.builder._node(nid).name

    def _check_open(self) -> None:
        if self._state == "invalidated":
            raise CaptureInvalidated(
                "this capture was invalidated by an earlier error "
                f"(cudaErrorStreamCaptureInvalidated): {self._why}. Start a new capture"
            )
        if self._state == "ended":
            raise CaptureError("this capture has ended; start a new one with oxiwork.capture()")

    def _fail(self, err: GraphError) -> GraphError:
        # As on a GPU, an illegal call during capture invalidates the whole capture.
        self._state = "invalidated"
        self._why = str(err)
        return err


def capture(origin: str = "main") -> Capture:
    """Begin a stream capture on the stream named ``origin`` (``cudaStreamBeginCapture``).

    Returns a :class:`Capture`; use it as a context manager, issue work through
    ``cap.stream(name)``, and read ``cap.graph`` afterwards. See the module docstring for
    the dependencies capture creates and the errors it raises.
    """
    return Capture(origin)


def _check_bakeable(cap: Capture, kernel: str, key: str, value: Any) -> None:
    # Scalars (Python's, and numpy's, which are immutable) are values: the builder checks
    # them. A container, array or tensor is host state whose later changes capture loses.
    if isinstance(value, (bool, str)):
        return
    if isinstance(value, numbers.Number) and getattr(value, "shape", ()) == ():
        return
    raise cap._fail(
        BakedHostValue(
            f"kernel {kernel!r}: parameter {key!r} is a {type(value).__module__}."
            f"{type(value).__qualname__}, a host object. Capture copies kernel parameters "
            "by value when the launch is captured, so later changes to it would never "
            "reach the graph (a CPU value baked into the graph). Pass float(...) to bake "
            "today's value on purpose, or keep the value in a device buffer that a "
            "captured memcpy refreshes before each replay"
        )
    )
