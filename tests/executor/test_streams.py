"""Tests for oxiwork.executor.streams with a fake driver (no GPU needed): every step is
issued once, in plan order, on its own stream, event pairs use one real event, and every
run forks from and joins into stream 0."""

from __future__ import annotations

import numpy as np
import pytest

from oxiwork.error import ExecutionError, GraphError
from oxiwork.executor.streams import StreamExecutor
from tests.executor.gpu_fakes import FakeDriver, diamond_plan

_ISSUE = {
    "kernel": "cuLaunchKernel",
    "memcpy": ("cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync"),
    "memset": ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"),
    "event_record": "cuEventRecord",
    "event_wait": "cuStreamWaitEvent",
    "host": "cuLaunchHostFunc",
}


def _run_calls(fake: FakeDriver, ex: StreamExecutor) -> list[tuple[str, tuple]]:
    start = len(fake.calls)
    ex.run({"x": np.ones(1024, np.float32)})
    calls = fake.calls[start:]
    assert calls[0][0] == "cuStreamSynchronize"  # nothing in flight reads the inputs
    # from the timing start event on
    return calls[[c[0] for c in calls].index("cuEventRecord") :]


def _construction_calls() -> int:
    fake = FakeDriver()
    StreamExecutor(diamond_plan(), driver=fake).close()
    return fake.names().index("cuCtxSynchronize") - 1


class TestStreamExecutor:
    def test_every_step_once_in_order_on_its_stream(self):
        fake = FakeDriver()
        with StreamExecutor(diamond_plan(), driver=fake) as ex:
            assert ex.num_streams == 2
            calls = _run_calls(fake, ex)
            # start record, fork record, 1 fork wait, then the steps
            body = calls[3 : 3 + len(ex.desc.nodes)]
            assert calls[0][0] == "cuEventRecord" and calls[1][0] == "cuEventRecord"
            for (name, args), node in zip(body, ex.desc.nodes, strict=True):
                want = _ISSUE[node.kind]
                assert name in (want if isinstance(want, tuple) else (want,)), node.name
                stream = ex._streams[node.stream]
                if name == "cuLaunchKernel":
                    assert args[8] is stream and args[9] == ex._packed[node.index].kernel_params
                elif name == "cuEventRecord":
                    assert args == (ex._events[node.event], stream)
                elif name == "cuStreamWaitEvent":
                    assert args[:2] == (stream, ex._events[node.event])
                else:
                    assert args[-1] is stream

    def test_fork_and_join_bracket_the_work(self):
        fake = FakeDriver()
        with StreamExecutor(diamond_plan(), driver=fake) as ex:
            calls = _run_calls(fake, ex)
            main, side = ex._streams
            assert calls[1] == ("cuEventRecord", (ex._fork, main))
            assert calls[2] == ("cuStreamWaitEvent", (side, ex._fork, 0))
            tail = [c for c in calls if c[0] in ("cuEventRecord", "cuStreamWaitEvent")][-3:]
            assert tail == [
                ("cuEventRecord", (ex._joins[1], side)),
                ("cuStreamWaitEvent", (main, ex._joins[1], 0)),
                ("cuEventRecord", (ex._stop, main)),
            ]
            assert calls[-2][0] == "cuStreamSynchronize" and calls[-2][1] == (main,)

    def test_more_streams_on_request(self):
        with StreamExecutor(diamond_plan(), driver=FakeDriver(), num_streams=5) as ex:
            assert len(ex._streams) == 5

    def test_close_releases_everything(self):
        fake = FakeDriver()
        ex = StreamExecutor(diamond_plan(), driver=fake)
        ex.run()
        ex.close()
        ex.close()
        assert fake.live == {}
        with pytest.raises(ExecutionError, match="closed"):
            ex.run()

    @pytest.mark.parametrize("fail_at", range(_construction_calls()))
    def test_no_leak_when_a_construction_call_fails(self, fail_at):
        fake = FakeDriver(fail_at=fail_at)
        with pytest.raises(GraphError) as info:
            StreamExecutor(diamond_plan(), driver=fake)
        assert fake.names()[fail_at] in str(info.value)
        assert fake.live == {}
